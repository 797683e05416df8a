"""The tenant PostgreSQL sees (row-level security reads it): for a transaction, a task or a request."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar
from uuid import UUID

from django.db import connection, transaction

from core.db import wire
from core.db.tenant import current as _tenant
from core.errors import NotFound
from core.models import Tenant

TENANT_SETTING = "app.tenant_id"
T = TypeVar("T")
# No tenant's id: a query that names it in its predicate finds no row.
NO_TENANT = UUID(int=0)


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
    tenant_id = _RUN_TENANT.first_value_of({"run_id": run_id})
    return UUID(tenant_id.decode()) if tenant_id is not None else None


# Asked by every worker task and every outside worker's call: prepared, as the step commit is.
_RUN_TENANT = wire.Statement.named(
    "keeper_run_tenant", "SELECT keeper_run_tenant(%(run_id)s)", {"run_id": wire.UUID}, tenant=False
)


@contextmanager
def tenant_bind(tenant_id: UUID) -> Iterator[None]:
    """This tenant for every statement of the block (blocks nest like a stack). Nothing is sent to the
    database: each statement carries the tenant into its own transaction (core.db), so no server
    connection ever keeps it, behind a transaction pooler or not."""
    if not isinstance(tenant_id, UUID):
        raise TypeError("tenant_bind takes the tenant's UUID")
    token = _tenant.set(str(tenant_id))
    try:
        yield
    finally:
        _tenant.reset(token)


@contextmanager
def tenant_unbound() -> Iterator[None]:
    """No tenant for the block's statements (as a fresh request or task starts): they see no
    tenant's rows and may write none."""
    token = _tenant.set("")
    try:
        yield
    finally:
        _tenant.reset(token)


def tenant_is_bound(tenant_id: UUID) -> bool:
    """Whether this tenant is the one the statements of this thread or task carry now."""
    return _tenant.get() == str(tenant_id)


def tenant_bound() -> UUID:
    """The one tenant the statements of this thread or task carry now, for a query to name in its own
    predicate; NO_TENANT when none is bound, or several are (a console user's request), so that a
    query naming it finds nothing."""
    value = _tenant.get()
    return UUID(value) if value and "," not in value else NO_TENANT


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


def tenant_bind_request(request: Any, tenant_ids: UUID | Sequence[UUID]) -> None:
    """This tenant (or, for a console user of several tenants, these) for the rest of a web request;
    TenantResetMiddleware ends it with the request. No tenant: nothing is visible."""
    ids = [tenant_ids] if isinstance(tenant_ids, UUID) else list(tenant_ids)
    if not all(isinstance(t, UUID) for t in ids):
        raise TypeError("tenant_bind_request takes tenant UUIDs")
    _tenant.set(",".join(str(t) for t in ids))


class TenantResetMiddleware:
    """A request starts with no tenant, whatever its thread served before: only the request's own
    authentication (tenant_bind_request) makes rows visible, and that ends with the request."""

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        token = _tenant.set("")
        try:
            return self.get_response(request)
        finally:
            _tenant.reset(token)


@contextmanager
def tenant_scope(tenant_id: UUID) -> Iterator[None]:
    """A transaction in which PostgreSQL's row-level security shows only this tenant's rows.

    The tenant for one transaction: set at its start (for a raw cursor inside it too) and carried by
    every statement of the block; it ends with the transaction. A nested scope (or one inside a bound
    task or request) may name another tenant; the previous one is put back when it ends.
    """
    if not isinstance(tenant_id, UUID):
        raise TypeError("tenant_scope takes the tenant's UUID")
    outermost = connection.get_autocommit() and not connection.in_atomic_block
    with transaction.atomic():
        token = _tenant.set(str(tenant_id))
        try:
            with connection.cursor() as cursor:  # set for the transaction: a raw cursor in it sees it too
                cursor.execute("SELECT 1")
            yield
        finally:
            _tenant.reset(token)
        if not outermost:  # the enclosing transaction goes on as the tenant it had
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
