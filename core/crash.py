"""Controlled crash points for chaos tests: KEEPER_CRASH_AT=name[:N] kills the process at the Nth hit.

The process dies with os._exit(137): no cleanup, no exception handlers, no flushed buffers, as if
the machine lost power. The hit counter lives in the process, so a restarted worker starts again.
"""

from __future__ import annotations

import os
import sys

_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get("KEEPER_CRASH_AT", "")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= (int(nth) if nth else 1):
        sys.stderr.write(f"keeper: crash point {name} reached, exiting with 137\n")
        sys.stderr.flush()
        os._exit(137)
