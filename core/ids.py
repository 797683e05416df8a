"""Time-ordered ids (UUID version 7, RFC 9562) for rows that are inserted all the time and indexed
by id: runs.

A version-4 id is random, so every insert lands on a random leaf page of each index that holds it
(agent_runs' primary key and the tenant-led indexes ending in run_id). The first change to a page
after a checkpoint writes the whole 8 KB page to the WAL, and a random page is usually one not yet
changed, so each run started cost several such images. A version-7 id starts with the time in
milliseconds, so a new run's entries go next to the last run's, on pages already in the WAL since
the checkpoint. The remaining 74 bits are random: an id is as hard to guess as it was, but it shows
when the run was created, which everyone who may see the run can see anyway.
"""

from __future__ import annotations

import os
import time
from uuid import UUID

_VERSION = 0x7 << 76
_VARIANT = 0x2 << 62  # RFC 9562's variant, 10 in binary
_RANDOM_A = ((1 << 12) - 1) << 64  # the 12 bits after the version
_RANDOM_B = (1 << 62) - 1


def uuid7(*, at_ms: int | None = None) -> UUID:
    """A new version-7 UUID: 48 bits of Unix time in milliseconds (`at_ms`, else now), then the
    version, 12 random bits, the variant and 62 random bits. Ids made in one millisecond are in
    random order among themselves; ids of different milliseconds sort by time."""
    ms = time.time_ns() // 1_000_000 if at_ms is None else at_ms
    if not 0 <= ms < 1 << 48:
        raise ValueError(f"a version-7 UUID holds 48 bits of milliseconds, not {ms}")
    rand = int.from_bytes(os.urandom(10), "big")
    return UUID(int=(ms << 80) | _VERSION | (rand & _RANDOM_A) | _VARIANT | (rand & _RANDOM_B))


def short_id(value: object) -> str:
    """The last 8 hex digits of an id, as a person reads it in a list. Random in a version-4 and a
    version-7 id alike, where the first 8 are a version-7 id's time: every run started in the same
    minute or so would show the same first 8."""
    return str(value)[-8:]
