"""The test kit's clock: one offset that Python (django.utils.timezone.now) and PostgreSQL
(statement_timestamp(), now() and their kin in the test database) both add, so a test skips time.

The engine's timers, leases and wake-ups are compared in SQL (runs/kernel/_sql) and its approvals'
and signals' deadlines in Python: skipping only one side would let them disagree. In the test
database the functions are shadowed by ones in the schema keeper_test_clock, placed on the search
path before pg_catalog; they add the offset kept in keeper_test_clock.skew (0 unless a test moved
it). Never installed outside a test database.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import connections
from django.utils import timezone

SCHEMA = "keeper_test_clock"

_SHADOWED = (
    ("statement_timestamp", "STABLE"),
    ("now", "STABLE"),
    ("transaction_timestamp", "STABLE"),
    ("clock_timestamp", "VOLATILE"),
)


def _install_sql(database: str) -> list[str]:
    statements = [
        f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.skew (one boolean PRIMARY KEY DEFAULT true CHECK (one),"
        " seconds double precision NOT NULL DEFAULT 0)",
        f"INSERT INTO {SCHEMA}.skew (one, seconds) VALUES (true, 0) ON CONFLICT DO NOTHING",
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO PUBLIC",
        f"GRANT SELECT, UPDATE ON {SCHEMA}.skew TO PUBLIC",
    ]
    for name, volatility in _SHADOWED:
        statements.append(
            f"CREATE OR REPLACE FUNCTION {SCHEMA}.{name}() RETURNS timestamptz LANGUAGE sql {volatility}"
            f" AS $$ SELECT pg_catalog.{name}() + make_interval(secs => (SELECT seconds FROM {SCHEMA}.skew)) $$"
        )
    # pg_catalog named last: the shadows come first, and CREATE still goes to public.
    statements.append(f'ALTER DATABASE "{database}" SET search_path = "$user", public, {SCHEMA}, pg_catalog')
    return statements


def clock_install(*, owner_alias: str = "owner", alias: str = "default") -> None:
    """Put the shadowing functions into the test database (as its owner) and have every connection
    opened from now on use them. Idempotent; call it once per test session, outside a transaction."""
    owner = connections[owner_alias]
    with owner.cursor() as cursor:
        for statement in _install_sql(owner.settings_dict["NAME"]):
            cursor.execute(statement)
    connections[alias].close()  # the next connection reads the database's new search path


class Clock:
    """The test's clock. `advance` moves both Python's and PostgreSQL's "now" forward; nothing sleeps."""

    def __init__(self, alias: str = "default"):
        self.alias = alias
        self.offset = 0.0
        self._real_now: Callable[[], datetime] | None = None

    def now(self) -> datetime:
        real = self._real_now or timezone.now
        return real() + timedelta(seconds=self.offset)

    def start(self) -> None:
        """Take over django.utils.timezone.now (every `timezone.now()` in Keeper reads it) and make
        sure this connection uses the shadowed SQL clock."""
        if self._real_now is None:
            self._real_now = timezone.now
            timezone.now = self.now
        with connections[self.alias].cursor() as cursor:
            cursor.execute(f'SET search_path = "$user", public, {SCHEMA}, pg_catalog')
        self._write()

    def stop(self) -> None:
        self.offset = 0.0
        try:
            self._write()
        finally:
            if self._real_now is not None:
                timezone.now = self._real_now
                self._real_now = None

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the test clock moves forward only")
        self.offset += seconds
        self._write()

    def _write(self) -> None:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(f"UPDATE {SCHEMA}.skew SET seconds = %s", [self.offset])
