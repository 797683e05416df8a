"""Erasure reaches stores owned by several apps; each app registers an eraser for its own stores.

The memory app's erasure service runs them all and writes their counts into the receipt; core
imports no app, so the apps register themselves (in their AppConfig.ready).
"""

from __future__ import annotations

from typing import Protocol
from uuid import UUID


class Eraser(Protocol):
    name: str

    def erase(self, *, tenant_id: UUID, subject_id: str) -> dict[str, int]:
        """Delete or redact what this app keeps about the subject; counts per store."""
        ...

    def scan(self, *, tenant_id: UUID, subject_id: str, values: list[str]) -> dict[str, int]:
        """What is still there: the subject's rows, or any of these erased texts; counts per store."""
        ...


_ERASERS: dict[str, Eraser] = {}


def eraser_register(eraser: Eraser) -> None:
    _ERASERS[eraser.name] = eraser


def erasers() -> list[Eraser]:
    return list(_ERASERS.values())
