"""The tenant PostgreSQL sees (row-level security reads it): for a transaction, a task or a request."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import Any, TypeVar
from uuid import UUID

from django.db import connection, transaction

from core.errors import NotFound
from core.models import Tenant

TENANT_SETTING = "app.tenant_id"
T = TypeVar("T")
# The tenant (or, for a console user of several tenants, the comma-separated tenants) the statements
# of this thread or task carry into their own transactions: '' sees nothing.
_tenant: ContextVar[str] = ContextVar("keeper_tenant", default="")


def tenant_setting() -> str:
    """What `app.tenant_id` must be in the transaction of the next statement."""
    return _tenant.get()


def tenant_get(*, slug_or_id: str | UUID) -> Tenant:
    try:
        if isinstance(slug_or_id, UUID):
            return Tenant.objects.get(tenant_id=slug_or_id)
        try:
            return Tenant.objects.get(tenant_id=UUID(slug_or_id))
        except ValueError:
            return Tenant.objects.get(slug=slug_or_id)
    except Tenant.DoesNotExist:
        raise NotFound(f"no tenant {slug_or_id!s}", code="unknown_tenant") from None


def tenant_ensure(*, slug: str, name: str = "") -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


def run_tenant(run_id: UUID) -> UUID | None:
    """The tenant of a run, through the narrow SECURITY DEFINER function (no other column leaves it);
    None if there is no such run. Workers and operator commands use it to know which tenant to set."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT keeper_run_tenant(%s)", [run_id])
        tenant_id: UUID | None = cursor.fetchone()[0]
        return tenant_id


def _tenant_set(value: str, *, local: bool) -> str:
    """Set the tenant setting; return the value it had."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting(%s, true), set_config(%s, %s, %s)",
            [TENANT_SETTING, TENANT_SETTING, value, local],
        )
        return cursor.fetchone()[0] or ""


_bound = threading.local()  # the tenant tenant_bind set on which raw connection, in this thread


@contextmanager
def tenant_bind(tenant_id: UUID) -> Iterator[None]:
    """This tenant for the connection's session (not one transaction) for the duration of a task
    whose statements run in autocommit, such as the engine's one-statement commits. The previous
    value is put back in `finally` (blocks nest like a stack), so a pooled connection never keeps it.
    Inside a block that already bound this tenant on this connection it costs nothing."""
    if not isinstance(tenant_id, UUID):
        raise TypeError("tenant_bind takes the tenant's UUID")
    raw = connection.connection
    if raw is not None and getattr(_bound, "current", None) == (tenant_id, id(raw)):
        yield
        return
    previous = _tenant_set(str(tenant_id), local=False)
    outer = getattr(_bound, "current", None)
    _bound.current = (tenant_id, id(connection.connection))
    token = _tenant.set(str(tenant_id))
    try:
        yield
    finally:
        _tenant.reset(token)
        _bound.current = outer
        try:
            _tenant_set(previous, local=False)
        except Exception:
            _bound.current = None
            connection.close()  # cannot reset it (database gone, broken transaction): drop the session


def tenant_is_bound(tenant_id: UUID) -> bool:
    """Whether a tenant_bind block of this thread holds this tenant on the connection right now."""
    raw = connection.connection
    return raw is not None and getattr(_bound, "current", None) == (tenant_id, id(raw))


def tenant_of_call(function: Callable[..., T]) -> Callable[..., T]:
    """Run a keyword-only service as the tenant it names: `tenant`, `tenant_id`, or the tenant of
    `run_id` (learned through the narrow function). Callers still decide who may act on what."""

    @wraps(function)
    def bound(*args: Any, **kwargs: Any) -> T:
        if kwargs.get("tenant") is not None:
            tenant_id = kwargs["tenant"].tenant_id
        elif kwargs.get("tenant_id") is not None:
            tenant_id = kwargs["tenant_id"]
        elif kwargs.get("run_id") is not None:
            tenant_id = run_tenant(kwargs["run_id"])
        else:
            tenant_id = None
        if tenant_id is None:  # nothing to bind: row-level security shows nothing, the service says so
            return function(*args, **kwargs)
        with tenant_bind(tenant_id if isinstance(tenant_id, UUID) else UUID(str(tenant_id))):
            return function(*args, **kwargs)

    return bound


_REQUEST_PREVIOUS = "_keeper_tenant_previous"


def tenant_bind_request(request: Any, tenant_ids: UUID | Sequence[UUID]) -> None:
    """This tenant (or, for a console user of several tenants, these) for the rest of a web request;
    TenantResetMiddleware puts the previous value back. No tenant: nothing is visible."""
    ids = [tenant_ids] if isinstance(tenant_ids, UUID) else list(tenant_ids)
    if not all(isinstance(t, UUID) for t in ids):
        raise TypeError("tenant_bind_request takes tenant UUIDs")
    previous = _tenant_set(",".join(str(t) for t in ids), local=False)
    _tenant.set(",".join(str(t) for t in ids))
    _bound.current = None  # the python-side shortcut of tenant_bind no longer holds
    holder = getattr(request, "_request", request)  # DRF's Request wraps Django's
    if not hasattr(holder, _REQUEST_PREVIOUS):
        setattr(holder, _REQUEST_PREVIOUS, previous)


class TenantResetMiddleware:
    """Whatever tenant a request set for its connection is taken back when the request ends."""

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        # A request starts with no tenant, whatever the connection last served: only the request's
        # own authentication (tenant_bind_request) makes rows visible.
        try:
            setattr(request, _REQUEST_PREVIOUS, _tenant_set("", local=False))
        except Exception:  # the database is away: the request's own error handling answers
            connection.close()  # a new connection starts without a tenant
        _bound.current = None
        token = _tenant.set("")
        try:
            return self.get_response(request)
        finally:
            _tenant.reset(token)
            if hasattr(request, _REQUEST_PREVIOUS):
                try:
                    _tenant_set(getattr(request, _REQUEST_PREVIOUS), local=False)
                except Exception:
                    connection.close()


@contextmanager
def tenant_scope(tenant_id: UUID) -> Iterator[None]:
    """A transaction in which PostgreSQL's row-level security shows only this tenant's rows.

    The tenant for one transaction (SET LOCAL semantics: it ends with the
    transaction). A nested scope (or one inside a bound task or request) may name another
    tenant; the previous one is put back when it ends.
    """
    if not isinstance(tenant_id, UUID):
        raise TypeError("tenant_scope takes the tenant's UUID")
    outermost = connection.get_autocommit() and not connection.in_atomic_block
    with transaction.atomic():
        with connection.cursor() as cursor:  # the previous value and the new one in one round trip
            cursor.execute(
                "SELECT current_setting(%s, true), set_config(%s, %s, true)",
                [TENANT_SETTING, TENANT_SETTING, str(tenant_id)],
            )
            previous = cursor.fetchone()[0] or ""
        token = _tenant.set(str(tenant_id))
        try:
            yield
        finally:
            _tenant.reset(token)
        if not outermost:
            # Inside an outer transaction SET LOCAL would outlive this block: put the previous value
            # back. (The block's own commit ends it; on an exception the rollback reverts it.)
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config(%s, %s, true)", [TENANT_SETTING, previous])
