"""Controlled crash points for chaos tests: the process dies with os._exit(137) at a named point.

KEEPER_CRASH_AT=name[:N] kills the process at the Nth hit of that point in this process. With
KEEPER_CRASH_ONCE_DIR set, a point hit for a `key` (a run id) kills only the first time across all
processes: a marker file records the crash, so the restarted worker gets past it and each run
crashes exactly once there. KEEPER_CRASH_STEP limits points that any step passes (after_checkpoint)
to one step. os._exit skips every cleanup, exception handler and buffer flush, as
if the machine lost power. The three variables are read in config/settings/base.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.conf import settings

_hits: dict[str, int] = {}


def crash_point(name: str, *, key: str | None = None, step: str | None = None) -> None:
    spec = settings.KEEPER_CRASH_AT
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    only_step = settings.KEEPER_CRASH_STEP
    if only_step and step is not None and step != only_step:
        return
    once_dir = settings.KEEPER_CRASH_ONCE_DIR
    if once_dir and key is not None:
        marker = Path(once_dir) / f"{name}--{key}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return  # this run already crashed here once
        os.fsync(fd)
        os.close(fd)
        _die(name)
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= (int(nth) if nth else 1):
        _die(name)


def _die(name: str) -> None:
    sys.stderr.write(f"keeper: crash point {name} reached, exiting with 137\n")
    sys.stderr.flush()
    os._exit(137)
