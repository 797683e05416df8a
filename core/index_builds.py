"""One concurrent index build or drop per table at a time.

CREATE INDEX CONCURRENTLY (and DROP INDEX CONCURRENTLY) takes a self-conflicting lock on its table
and waits for older transactions to end; two or three of them on one table wait for each other, and
PostgreSQL ends one with "deadlock detected" (seen at `make run`'s start, when the worker's threads
built several tenants' memory graphs at once). The builders of a table take turns on an advisory
lock of the session that builds. They ask for it with pg_try_advisory_lock and sleep between tries:
a session blocked inside pg_advisory_lock would be a transaction with a snapshot, which the build
in progress waits for in turn.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

POLL_SECONDS = 0.2


def _key(table: str) -> int:
    return zlib.crc32(f"keeper:index-builds:{table}".encode())


@contextmanager
def index_builds_of(cursor: Any, table: str) -> Iterator[None]:
    """Hold the turn for concurrent index builds and drops on `table` (for the session of `cursor`,
    in autocommit) while the block runs."""
    key = _key(table)
    while True:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        if cursor.fetchone()[0]:
            break
        time.sleep(POLL_SECONDS)
    try:
        yield
    finally:
        cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
