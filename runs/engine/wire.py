"""One statement sent straight through libpq on Django's connection: the step commit's and the
LangGraph checkpoint put's path.

psycopg's cursor adapts each parameter through the connection's adapters (Django's among them) and
keeps its own prepared-statement bookkeeping: for a statement run on every step, that was about
40 µs of the worker's CPU per step (30 µs per checkpoint put). Here the parameters go as bytes in
text format (binary where the statement says so), with the types the statement declares; the
statement is prepared once per connection under its own name (when KEEPER_PREPARED_STATEMENTS
allows it, and outside transactions) and prepared again if the session forgot it. A transaction
Django opened lazily is begun first, as psycopg would. The wait is psycopg's own, so other threads
run and the call can be interrupted as any query.
"""

from __future__ import annotations

import re
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from psycopg import errors, generators, pq

__all__ = ["Statement", "bytea_array", "BOOL", "FLOAT8", "INT4", "INT8", "TEXT", "UNKNOWN", "UUID"]

# Parameter types by OID (pg_type); UNKNOWN lets the server infer it, as for an untyped literal.
UNKNOWN, BOOL, INT8, INT4, TEXT, FLOAT8, UUID = 0, 16, 20, 23, 25, 701, 2950
_BYTEA = 17
_EMPTY = struct.Struct("!iiI")  # no dimension, no nulls, element type
_HEADER = struct.Struct("!iiIii")  # one dimension, has nulls, element type, length, lower bound
_LENGTH = struct.Struct("!i")
_INVALID_STATEMENT = b"26000"  # invalid_sql_statement_name: the server has no statement by that name
_NAMED = re.compile(r"%\((\w+)\)s")


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
    ):
        self.name = name.encode()
        self.sql = sql.encode()
        self.types = list(types) or [UNKNOWN] * params
        if len(self.types) != params:
            raise ValueError(f"{name}: {params} parameters, {len(self.types)} types")
        self.formats = [pq.Format.BINARY if i in binary else pq.Format.TEXT for i in range(params)]
        self.names: list[str] = []
        self._prepared: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()

    @classmethod
    def named(cls, name: str, sql: str, types: Mapping[str, int]) -> Statement:
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
        statement = cls(name, numbered, params=len(names), types=[types[n] for n in names])
        statement.names = names
        return statement

    def first_value_of(self, params: Mapping[str, Any]) -> bytes | None:
        """first_value() with the parameters by name (a statement made by named())."""
        return self.first_value([_text(params[n]) for n in self.names])

    def first_value(self, params: Sequence[bytes | None]) -> bytes | None:
        """Run it on Django's connection (its transaction, if one is open); the first column of the
        first row, as text, or None if no row or NULL. Errors are Django's, as from a cursor."""
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors:
            result = self._execute(raw, params)
            if result.error_field(pq.DiagnosticField.SQLSTATE) == _INVALID_STATEMENT:
                # The session forgot it (psycopg's DEALLOCATE ALL after a rollback, a pooler's
                # DISCARD ALL): prepare it again. Only ever in autocommit, see _execute.
                self._prepared.discard(raw)
                result = self._execute(raw, params)
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise errors.error_from_result(result, encoding=raw.info.encoding)
            return result.get_value(0, 0) if result.ntuples else None

    def _execute(self, raw: psycopg.Connection[Any], params: Sequence[bytes | None]) -> pq.abc.PGresult:
        pgconn = raw.pgconn
        # Inside Django's atomic() the transaction may not have begun yet: psycopg begins it before a
        # cursor's first statement, and so must this path (with the connection's isolation level).
        raw.wait(raw._start_query())
        # Unprepared behind a transaction pooler (no named statements), and inside a transaction:
        # psycopg deallocates every prepared statement of the session when one rolls back, and a
        # statement found missing there would end the caller's transaction. Keeper's commits and
        # puts run in autocommit, where a missing statement is prepared again (first_value).
        if not settings.KEEPER_PREPARED_STATEMENTS or pgconn.transaction_status != pq.TransactionStatus.IDLE:
            pgconn.send_query_params(self.sql, params, param_types=self.types, param_formats=self.formats)
            return _last_result(raw)
        if raw not in self._prepared:
            pgconn.send_prepare(self.name, self.sql, param_types=self.types)
            prepared = _last_result(raw)
            if prepared.status != pq.ExecStatus.COMMAND_OK:
                return prepared
            self._prepared.add(raw)
        pgconn.send_query_prepared(self.name, params, param_formats=self.formats)
        return _last_result(raw)


def _last_result(raw: psycopg.Connection[Any]) -> pq.abc.PGresult:
    """The last result of what was just sent, waited for as psycopg waits for a cursor's."""
    results: list[pq.abc.PGresult] = raw.wait(generators.execute(raw.pgconn))
    return results[-1]
