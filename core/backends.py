"""Pluggable parts, built the way Django builds its own backends: settings.BACKENDS[part] holds a
dotted BACKEND path and its OPTIONS, and backend_build imports the class and calls it with them.

Settings hold dotted strings only, so core imports no app; config.env.backend_choice fills them
from the README's environment variables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

# Parts built differently inside a block (an evaluation's replay runs its steps with another model or
# compactor): {part: {"BACKEND": dotted path, "OPTIONS": {...}}}, checked by whoever sets it.
_overrides: ContextVar[Mapping[str, Mapping[str, Any]] | None] = ContextVar(
    "keeper_backend_overrides", default=None
)


@contextmanager
def backends_overridden(overrides: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """Inside the block, backend_build builds these parts from the given specs instead of settings."""
    token = _overrides.set({**(_overrides.get() or {}), **overrides})
    try:
        yield
    finally:
        _overrides.reset(token)


def backend_build(part: str) -> Any:
    """A new instance of the part's backend (the caller annotates the part's base class)."""
    spec = (_overrides.get() or {}).get(part)
    if spec is None:
        try:
            spec = settings.BACKENDS[part]
        except KeyError:
            raise ImproperlyConfigured(f"settings.BACKENDS has no {part!r}") from None
    try:
        backend = import_string(spec["BACKEND"])
    except ImportError as exc:
        raise ImproperlyConfigured(f"settings.BACKENDS[{part!r}]: {exc}") from None
    return backend(**spec.get("OPTIONS", {}))
