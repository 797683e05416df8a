"""Django's PostgreSQL backend, each statement preceded by the bound tenant in the same transaction.

Row-level security reads the tenant from `app.tenant_id`. A session-level setting would stay on the
server connection, and a transaction pooler (PgBouncer in transaction mode) hands that connection to
another client after every transaction. So every statement Django sends goes as
`SELECT set_config('app.tenant_id', '<tenant>', true); <statement>` in one simple query: one round
trip, one implicit transaction (or the caller's open one), and the setting ends with it. The tenant
is core.tenancy's context variable ('' when none is bound: the statement sees nothing).

Django binds parameters on the client (its default, `server_side_binding` off), which is what lets
two statements travel in one query; server-side cursors are off (DISABLE_SERVER_SIDE_CURSORS) for
the same reason and because a pooler cannot keep them between transactions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.backends.postgresql import base
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from core.db.tenant import tenant_setting

_TENANTS = re.compile(r"^(?:[0-9a-f-]{36}(?:,[0-9a-f-]{36})*)?$")
# Sent as they are: transaction control (a ROLLBACK TO SAVEPOINT must run in a transaction aborted by
# an error, where any other statement in front of it would be refused) and the commands PostgreSQL
# runs only outside a transaction block (a two-statement query is one). None reads a tenant's rows.
_AS_IT_IS = re.compile(
    r"^\s*(?:SAVEPOINT|RELEASE|ROLLBACK|COMMIT|BEGIN|START\s+TRANSACTION|END|ABORT"
    r"|(?:CREATE|DROP|ALTER)\s+DATABASE|VACUUM|ALTER\s+SYSTEM|CLUSTER"
    r"|(?:CREATE|DROP)\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY|REINDEX\b.*\bCONCURRENTLY)\b",
    re.IGNORECASE | re.DOTALL,
)


def tenant_prefix(sql: str = "") -> str:
    """The statement that sets the bound tenant for the transaction of what follows it ('' before
    transaction control and the commands that cannot run in a transaction block)."""
    if isinstance(sql, str) and _AS_IT_IS.match(sql):
        return ""
    tenant = tenant_setting()
    if not _TENANTS.match(tenant):  # only UUIDs ever get here (core.tenancy checks), but a literal
        raise ValueError(f"not a tenant setting: {tenant!r}")  # is only ever built from what we check
    return f"SELECT set_config('app.tenant_id', '{tenant}', true); "


class _Tenanted:
    """The cursor wrapper's two ways of running SQL, each with the tenant first."""

    cursor: Any
    db: Any

    def _execute(self, sql: str, params: Any, *ignored_wrapper_args: Any) -> Any:
        self.db.validate_no_broken_transaction()
        with self.db.wrap_database_errors:
            prefix = tenant_prefix(sql)
            if params is None:
                self.cursor.execute(prefix + sql)
            else:
                self.cursor.execute(prefix + sql, params)
            if prefix:
                self.cursor.nextset()  # what the caller reads is its own statement's result
            return self.cursor

    def _executemany(self, sql: str, param_list: Iterable[Sequence[Any]], *ignored_wrapper_args: Any) -> Any:
        self.db.validate_no_broken_transaction()
        with self.db.wrap_database_errors:
            if self.db.get_autocommit() and not self.db.in_atomic_block:
                from django.db import transaction

                with transaction.atomic(using=self.db.alias):  # one transaction: the setting holds
                    self.cursor.execute(tenant_prefix().rstrip("; "))
                    return self.cursor.executemany(sql, param_list)
            self.cursor.execute(tenant_prefix().rstrip("; "))
            return self.cursor.executemany(sql, param_list)


class TenantCursorWrapper(_Tenanted, CursorWrapper):
    pass


class TenantCursorDebugWrapper(_Tenanted, CursorDebugWrapper):
    pass


class DatabaseWrapper(base.DatabaseWrapper):
    def make_cursor(self, cursor: Any) -> CursorWrapper:
        return TenantCursorWrapper(cursor, self)

    def make_debug_cursor(self, cursor: Any) -> CursorDebugWrapper:
        return TenantCursorDebugWrapper(cursor, self)
