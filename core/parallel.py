"""One search arm on a connection of its own while the caller runs the other on its connection.

A hybrid search's two arms (a graph walk; an aggregate over the postings of the words) each cost
their PostgreSQL backend several milliseconds of CPU. Run one after the other, a search takes their
sum; with one of them on a pool thread's own connection, about the longer of the two. Only outside a
transaction (`alone()`): another connection would not see what the caller's transaction wrote. The
two arms then read two snapshots; the searches read their hits again afterwards under the same rules.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections, connection

from core.tenancy import tenant_scope

T = TypeVar("T")

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


def _in_scope(
    tenant_id: UUID, function: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> T:
    # The pool thread's connection is kept between searches as a request's is (CONN_MAX_AGE, health
    # checks): checked before use, closed after if it is too old or broke.
    close_old_connections()
    try:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            return function(cursor, *args, **kwargs)
    finally:
        close_old_connections()


def beside(tenant_id: UUID, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """function(cursor, *args, **kwargs) on a pool thread, in a tenant scope on that thread's own
    connection; the caller goes on with its own work and takes the result from the future."""
    return _executor().submit(_in_scope, tenant_id, function, args, kwargs)
