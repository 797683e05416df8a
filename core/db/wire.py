"""Statements sent through Django's connection with the tenant set inside their own transaction.

A transaction pooler (PgBouncer in transaction mode) hands a server connection to another client
after every transaction, so nothing may rely on session state: the tenant row-level security reads
(`app.tenant_id`) is set with `set_config(..., true)` in the same pipeline as the statement, before
one Sync. Outside a transaction the two are one implicit transaction and one round trip; inside the
caller's transaction the setting holds for the rest of it, which every later statement sets again.

Two paths. `rows()` is Django's cursor (any statement). `Statement` is for the statements
run on every step (the step commit, the checkpoint put): its parameters go as bytes in text format
(binary where it says so) with declared types, straight through libpq, which saves ~40 µs of the
worker's CPU per statement; it is prepared once per connection under its own name when
KEEPER_PREPARED_STATEMENTS allows it, and prepared again if the session forgot it.
"""

from __future__ import annotations

import re
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg import errors, generators, pq
from psycopg.adapt import Transformer
from psycopg.waiting import Ready, Wait

from core.db.tenant import tenant_setting

__all__ = ["Statement", "bytea_array", "rows", "BOOL", "FLOAT8", "INT4", "INT8", "TEXT", "UNKNOWN", "UUID"]

# Parameter types by OID (pg_type); UNKNOWN lets the server infer it, as for an untyped literal.
UNKNOWN, BOOL, INT8, INT4, TEXT, FLOAT8, UUID = 0, 16, 20, 23, 25, 701, 2950
_BYTEA = 17
_EMPTY = struct.Struct("!iiI")  # no dimension, no nulls, element type
_HEADER = struct.Struct("!iiIii")  # one dimension, has nulls, element type, length, lower bound
_LENGTH = struct.Struct("!i")
_INVALID_STATEMENT = b"26000"  # invalid_sql_statement_name: the server has no statement by that name
_NAMED = re.compile(r"%\((\w+)\)s")
_SET_TENANT = b"SELECT set_config('app.tenant_id', $1, true)"
_SET_TENANT_NAME = b"keeper_set_tenant"
_WAIT_R, _WAIT_RW, _READY_R = Wait.R, Wait.RW, Ready.R


def bytea_array(values: Sequence[bytes | None]) -> bytes:
    """A bytea[] in PostgreSQL's binary format (one dimension, from 1)."""
    if not values:
        return _EMPTY.pack(0, 0, _BYTEA)
    parts = [_HEADER.pack(1, any(v is None for v in values), _BYTEA, len(values), 1)]
    for value in values:
        parts.append(_LENGTH.pack(-1) if value is None else _LENGTH.pack(len(value)) + value)
    return b"".join(parts)


def _text(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text format: NULL, t/f, or the value's str()."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


def _prepare_threshold_for_named(raw: psycopg.Connection[Any]) -> bool:
    """Whether statements may be prepared: Django turns psycopg's automatic preparation off; keep it
    off for the ORM (a threshold never reached) but let these statements be prepared explicitly."""
    prepare = bool(settings.KEEPER_PREPARED_STATEMENTS)
    if prepare and raw.prepare_threshold is None:
        raw.prepare_threshold = 2**31
    return prepare


def rows(
    sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None, *, using: str = "default"
) -> list[tuple[Any, ...]]:
    """Run one statement through Django's cursor (which carries the bound tenant into the statement's
    own transaction); its rows ([] for a statement that returns none)."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


class Statement:
    """A statement with $n parameters; `types` gives each one's type (OIDs, default UNKNOWN) and
    `binary` names the (0-based) parameters sent in binary."""

    def __init__(
        self,
        name: str,
        sql: str,
        *,
        params: int,
        types: Sequence[int] = (),
        binary: Sequence[int] = (),
        tenant: bool = True,
    ):
        self.name = name.encode()
        # False only for a statement whose result no tenant changes (a SECURITY DEFINER function that
        # reads no setting): it goes alone, without the tenant's set_config before it.
        self.tenant = tenant
        self.sql = sql.encode()
        self.types = list(types) or [UNKNOWN] * params
        if len(self.types) != params:
            raise ValueError(f"{name}: {params} parameters, {len(self.types)} types")
        self.formats = [pq.Format.BINARY if i in binary else pq.Format.TEXT for i in range(params)]
        self.names: list[str] = []
        self._prepared: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()

    @classmethod
    def named(cls, name: str, sql: str, types: Mapping[str, int], *, tenant: bool = True) -> Statement:
        """From a statement written with %(name)s placeholders (as for psycopg): each name becomes
        one $n, typed from `types`, which must name every one."""
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        numbered = _NAMED.sub(number, sql)
        missing = set(names) - set(types)
        if missing:
            raise ValueError(f"{name}: no type for {sorted(missing)}")
        statement = cls(name, numbered, params=len(names), types=[types[n] for n in names], tenant=tenant)
        statement.names = names
        return statement

    def first_value_of(self, params: Mapping[str, Any]) -> bytes | None:
        """first_value() with the parameters by name (a statement made by named())."""
        return self.first_value([_text(params[n]) for n in self.names])

    def first_value(self, params: Sequence[bytes | None]) -> bytes | None:
        """Run it on Django's connection (its transaction, if one is open) with the bound tenant; the
        first column of the first row, as text, or None if no row or NULL. Errors are Django's, as
        from a cursor."""
        result = self._result(params)
        return result.get_value(0, 0) if result.ntuples else None

    def first_row_of(self, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The first row (None if none), its values loaded as a cursor of the connection loads them,
        with the parameters by name (a statement made by named())."""
        result = self._result([_text(params[n]) for n in self.names])
        if not result.ntuples:
            return None
        loader = Transformer(connection.connection)
        loader.set_pgresult(result)
        return loader.load_row(0, tuple)

    def _result(self, params: Sequence[bytes | None]) -> pq.abc.PGresult:
        db = connections[DEFAULT_DB_ALIAS]  # the thread's connection, looked up once
        db.ensure_connection()
        raw = db.connection
        with db.wrap_database_errors:
            result = self._execute(raw, params)
            if (
                result.status == pq.ExecStatus.FATAL_ERROR
                and result.error_field(pq.DiagnosticField.SQLSTATE) == _INVALID_STATEMENT
            ):
                # The session forgot it (psycopg's DEALLOCATE ALL after a rollback, a pooler's
                # DISCARD ALL): prepare it again. Only ever in autocommit, see _execute.
                self._prepared.discard(raw)
                _SET_TENANT_PREPARED.discard(raw)
                result = self._execute(raw, params)
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise errors.error_from_result(result, encoding=raw.info.encoding)
            return result

    def _execute(self, raw: psycopg.Connection[Any], params: Sequence[bytes | None]) -> pq.abc.PGresult:
        pgconn = raw.pgconn
        idle = pgconn.transaction_status == pq.TransactionStatus.IDLE
        if idle and not raw.autocommit:
            # Inside Django's atomic() the transaction may not have begun yet: psycopg begins it
            # before a cursor's first statement, and so must this path (with the connection's
            # isolation level).
            raw.wait(raw._start_query())
            idle = False
        # Unprepared behind a transaction pooler without named statements, and inside a transaction:
        # psycopg deallocates every prepared statement of the session when one rolls back, and a
        # statement found missing there would end the caller's transaction. Keeper's commits and
        # puts run in autocommit, where a missing statement is prepared again (_result).
        prepare = _prepare_threshold_for_named(raw) and idle
        prepare_tenant = prepare and self.tenant and raw not in _SET_TENANT_PREPARED
        prepare_self = prepare and raw not in self._prepared
        tenant = [tenant_setting().encode()]
        pgconn.enter_pipeline_mode()
        try:
            if prepare:
                if prepare_tenant:
                    pgconn.send_prepare(_SET_TENANT_NAME, _SET_TENANT, param_types=[TEXT])
                if self.tenant:
                    pgconn.send_query_prepared(_SET_TENANT_NAME, tenant)
                if prepare_self:
                    pgconn.send_prepare(self.name, self.sql, param_types=self.types)
                pgconn.send_query_prepared(self.name, params, param_formats=self.formats)
            else:
                if self.tenant:
                    pgconn.send_query_params(_SET_TENANT, tenant, param_types=[TEXT])
                pgconn.send_query_params(self.sql, params, param_types=self.types, param_formats=self.formats)
            pgconn.pipeline_sync()
            fetched = raw.wait(_pipeline_results(pgconn))
        finally:
            pgconn.exit_pipeline_mode()
        # In the order sent: [the tenant's prepare], the tenant, [the statement's prepare], the
        # statement; past those, an error of the implicit commit at the Sync (a deferred constraint
        # fails there, after the statement's own rows: Django's foreign keys are DEFERRABLE INITIALLY
        # DEFERRED). A statement prepared is kept by the session even when a later command failed.
        at = 0
        if prepare_tenant:
            if fetched[at].status == pq.ExecStatus.COMMAND_OK:
                _SET_TENANT_PREPARED.add(raw)
            at += 1
        if self.tenant:
            at += 1
        if prepare_self:
            if fetched[at].status == pq.ExecStatus.COMMAND_OK:
                self._prepared.add(raw)
            at += 1
        for result in fetched:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                return result
        return fetched[at]


_SET_TENANT_PREPARED: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


def _pipeline_results(pgconn: pq.abc.PGconn) -> generators.PQGen[list[pq.abc.PGresult]]:
    """Send what is queued and read every result up to the pipeline's Sync, one per command (a
    command after a failed one reports PIPELINE_ABORTED).

    Not psycopg's fetch_many: that asks libpq whether it is busy, and for notifications, before every
    result and every end of a command's results, and both calls release the interpreter lock. With
    many threads stepping runs, each release hands the lock to another thread and this one queues to
    take it back (a trivial statement's pipeline cost ~630 µs of the process's CPU instead of ~475 at
    16 threads). Here the lock is released only to wait for the socket and to ask whether a result
    may still be on its way: never after a result, whose end of results libpq returns without reading.
    """
    while pgconn.flush():  # what the socket did not take yet (a large state)
        ready = yield _WAIT_RW
        if ready & _READY_R:  # the server may answer before it has read everything
            pgconn.consume_input()
    results: list[pq.abc.PGresult] = []
    while not (yield _WAIT_R):  # the answer ends after the Sync, which has only just gone
        continue
    pgconn.consume_input()
    ended = after_result = False
    while True:
        if not after_result:  # after a result libpq is between commands and answers without reading
            while pgconn.is_busy():
                while not (yield _WAIT_R):
                    continue
                pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one command's results; twice in a row: libpq has given up
            if ended:
                raise errors.OperationalError(
                    f"the pipeline ended before its Sync: {pgconn.error_message.decode(errors='replace')}"
                )
            ended, after_result = True, False
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        results.append(result)
        ended, after_result = False, True
