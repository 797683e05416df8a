"""One statement sent straight through libpq on Django's connection: the checkpoint put's path.

psycopg's cursor adapts each parameter through the connection's adapters (Django's among them) and
keeps its own prepared-statement bookkeeping: for a call made on every LangGraph superstep, that
was a quarter of the put's time in the client (about 100 µs of CPU). Here the caller gives the
parameters already as bytes (text format, or binary where it says so); the statement is prepared
once per connection under its own name (when KEEPER_PREPARED_STATEMENTS allows it) and prepared
again if the server forgot it (a pooler's DISCARD ALL). The wait is psycopg's own, so other threads
run and the call can be interrupted as any query.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence

import psycopg
from django.conf import settings
from django.db import connection
from psycopg import errors, generators, pq

__all__ = ["Statement", "bytea_array"]

_BYTEA_OID = 17
_EMPTY = struct.Struct("!iiI")  # no dimension, no nulls, element type
_HEADER = struct.Struct("!iiIii")  # one dimension, has nulls, element type, length, lower bound
_LENGTH = struct.Struct("!i")
_INVALID_STATEMENT = b"26000"  # invalid_sql_statement_name: the server has no statement by that name


def bytea_array(values: Sequence[bytes | None]) -> bytes:
    """A bytea[] in PostgreSQL's binary format (one dimension, from 1)."""
    if not values:
        return _EMPTY.pack(0, 0, _BYTEA_OID)
    parts = [_HEADER.pack(1, any(v is None for v in values), _BYTEA_OID, len(values), 1)]
    for value in values:
        parts.append(_LENGTH.pack(-1) if value is None else _LENGTH.pack(len(value)) + value)
    return b"".join(parts)


class Statement:
    """A statement with $n parameters; `binary` names the (0-based) parameters sent in binary."""

    def __init__(self, name: str, sql: str, *, params: int, binary: Sequence[int] = ()):
        self.name = name.encode()
        self.sql = sql.encode()
        self.formats = [pq.Format.BINARY if i in binary else pq.Format.TEXT for i in range(params)]
        self._prepared: weakref.WeakSet[psycopg.Connection[object]] = weakref.WeakSet()

    def first_value(self, params: Sequence[bytes | None]) -> bytes | None:
        """Run it on Django's connection (its transaction, if one is open); the first column of the
        first row, as text, or None if no row or NULL. Errors are Django's, as from a cursor."""
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors:
            result = self._execute(raw, params)
            if (
                result.error_field(pq.DiagnosticField.SQLSTATE) == _INVALID_STATEMENT
                and raw.pgconn.transaction_status == pq.TransactionStatus.IDLE
            ):
                # The session was reset under us (a pooler's DISCARD ALL): prepare it again. Not
                # inside a transaction: the error has ended it, and the caller must know.
                self._prepared.discard(raw)
                result = self._execute(raw, params)
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise errors.error_from_result(result, encoding=raw.info.encoding)
            return result.get_value(0, 0) if result.ntuples else None

    def _execute(self, raw: psycopg.Connection[object], params: Sequence[bytes | None]) -> pq.abc.PGresult:
        pgconn = raw.pgconn
        # Inside Django's atomic() the transaction may not have begun yet: psycopg begins it before a
        # cursor's first statement, and so must this path (with the connection's isolation level).
        raw.wait(raw._start_query())
        if not settings.KEEPER_PREPARED_STATEMENTS:  # behind a transaction pooler: no named statements
            pgconn.send_query_params(self.sql, params, param_formats=self.formats)
            return raw.wait(generators.execute(pgconn))[-1]
        if raw not in self._prepared:
            pgconn.send_prepare(self.name, self.sql)
            prepared = raw.wait(generators.execute(pgconn))[-1]
            if prepared.status != pq.ExecStatus.COMMAND_OK:
                return prepared
            self._prepared.add(raw)
        pgconn.send_query_prepared(self.name, params, param_formats=self.formats)
        return raw.wait(generators.execute(pgconn))[-1]
