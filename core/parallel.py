"""A search's two arms at once: one on a pool thread's connection, the other on the caller's.

A hybrid search's two arms (a graph walk; an aggregate over the postings of the words) each cost
their PostgreSQL backend several milliseconds of CPU. Run one after the other, a search takes their
sum; with one of them on a pool thread's own connection, about the longer of the two. Only outside a
transaction (`alone()`): another connection would not see what the caller's transaction wrote. The
two arms then read two snapshots; the searches read their hits again afterwards under the same rules.

Each arm is a transaction of its own, and the caller waits for the other arm only after its own has
ended. Behind a transaction pooler a connection inside a transaction keeps its server connection:
a caller that waited inside one would hold a server connection while its other arm waited for a
second, and as many searches at once as the pool has server connections would all wait until the
pooler dropped them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections, connection

from core.tenancy import tenant_scope

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")

THREADS = 4  # per process; a search waits for a free one (each keeps one connection of its own)
_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def alone() -> bool:
    """Whether an arm may run on another connection now: the setting is on and the caller is not
    inside a transaction (whose writes another connection would not see)."""
    return bool(settings.KEEPER_SEARCH_PARALLEL_ARMS) and not connection.in_atomic_block


def _executor() -> ThreadPoolExecutor:
    """This process's pool, made on first use (and again in a forked child: a pool inherited through
    fork() has no threads behind it)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(THREADS, thread_name_prefix="keeper-search-arm"))
        return _pool[1]


def _in_scope(tenant_id: UUID, function: Callable[[Any], T]) -> T:
    # The pool thread's connection is kept between searches as a request's is (CONN_MAX_AGE, health
    # checks): checked before use, closed after if it is too old or broke.
    close_old_connections()
    try:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            return function(cursor)
    finally:
        close_old_connections()


def side_by_side(tenant_id: UUID, here: Callable[[Any], A], there: Callable[[Any], B]) -> tuple[A, B]:
    """here(cursor) on the caller's connection and there(cursor) on a pool thread's at the same time,
    each in a tenant scope (a transaction) of its own; the caller waits for `there` only once its own
    transaction has ended. Call it outside a transaction (`alone()`)."""
    if connection.in_atomic_block:
        raise RuntimeError("side_by_side runs each arm in a transaction of its own: call it outside one")
    future = _executor().submit(_in_scope, tenant_id, there)
    try:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            mine = here(cursor)
    except BaseException:
        wait([future])  # the other arm ends before the search fails
        raise
    return mine, future.result()
