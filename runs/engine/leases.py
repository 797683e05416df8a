"""Holding a run's lease while a step runs, renewed by a heartbeat thread of this process.

The lease bounds how many workers run a step at once; the epoch (fencing token) and the revision
stop a worker that lost it from committing. A Redis lock alone could not: its owner may pause and
wake up after the lock was handed to another.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

from core.tenancy import tenant_bind
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.records import LeaseGrant

logger = logging.getLogger(__name__)


class HeldLease:
    def __init__(self, grant: LeaseGrant, ttl: float):
        self.grant = grant
        self.ttl = ttl
        self.lost = False
        self.renewals = 0
        self._renewed_at = self.acquired_at = time.monotonic()

    @property
    def due(self) -> bool:
        return time.monotonic() - self._renewed_at >= self.ttl / 3

    def renew(self) -> bool:
        if self.lost:
            return False
        held = time.monotonic() - self.acquired_at
        if held > settings.CELERY_TASK_TIME_LIMIT:
            # A task past its time limit is killed in a prefork pool; a thread cannot be. Either way
            # the run must not wait for it: the lease is left to expire, another worker takes the run
            # over (resume verification), and this holder's commit, if it ever comes, is fenced.
            self.lost = True
            logger.warning(
                "lease on run %s (epoch %s) left to expire: held %.0f s, past KEEPER_TASK_TIME_LIMIT=%s",
                self.grant.run_id,
                self.grant.epoch,
                held,
                settings.CELERY_TASK_TIME_LIMIT,
            )
            return False
        expires = apply(
            m.LeaseRenewed(
                self.grant.run_id, self.grant.tenant_id, self.grant.owner, self.grant.epoch, self.ttl
            )
        )
        if expires is None:
            self.lost = True
            logger.warning("lease on run %s (epoch %s) was lost", self.grant.run_id, self.grant.epoch)
            return False
        self._renewed_at = time.monotonic()
        self.renewals += 1
        return True


class _Heartbeat:
    """One daemon thread per process renews every lease held in that process when it is due."""

    def __init__(self) -> None:
        self._leases: set[HeldLease] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="keeper-lease-heartbeat", daemon=True)
        self._thread.start()

    def add(self, lease: HeldLease) -> None:
        with self._lock:
            self._leases.add(lease)

    def remove(self, lease: HeldLease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def _loop(self) -> None:
        while True:
            self._wake.wait(max(0.05, settings.KEEPER_LEASE_TTL / 6))
            with self._lock:
                due = [lease for lease in self._leases if lease.due and not lease.lost]
                idle = not self._leases
            if idle:  # nothing held: give the connection back rather than keep it open for hours
                connection.close()
                continue
            for lease in due:
                try:
                    with tenant_bind(lease.grant.tenant_id):  # this thread's own connection
                        lease.renew()
                except Exception:  # the database is away: the lease may expire, the fence holds
                    logger.exception("lease heartbeat failed for run %s", lease.grant.run_id)
                    connection.close()


_heartbeat: _Heartbeat | None = None
_heartbeat_lock = threading.Lock()


def _heartbeat_for_this_process() -> _Heartbeat:
    global _heartbeat
    with _heartbeat_lock:
        if _heartbeat is None or _heartbeat._pid != os.getpid():  # a forked child starts its own
            _heartbeat = _Heartbeat()
        return _heartbeat


@contextmanager
def lease_held(grant: LeaseGrant, *, ttl: float | None = None) -> Iterator[HeldLease]:
    lease = HeldLease(grant, ttl if ttl is not None else settings.KEEPER_LEASE_TTL)
    heartbeat = _heartbeat_for_this_process()
    heartbeat.add(lease)
    try:
        yield lease
    finally:
        heartbeat.remove(lease)
