"""The tenant the statements of this thread or task carry into their own transactions.

`core.tenancy` decides it (a task's run, a request's user); the database layer (the backend's cursor
and `core.db.wire`) reads it into `app.tenant_id` inside each transaction, where row-level security
reads it. '' sees nothing; a console user of several tenants carries their ids comma-separated.
"""

from __future__ import annotations

from contextvars import ContextVar

current: ContextVar[str] = ContextVar("keeper_tenant", default="")


def tenant_setting() -> str:
    """What `app.tenant_id` must be in the transaction of the next statement."""
    return current.get()
