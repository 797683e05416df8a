"""Console roles and tenant membership, checked on the server for every page and action.

Roles are Django groups: support, compliance, engineer (a superuser has all). A user sees only the
tenants it is a member of; anything of another tenant is "not found", never "forbidden", so a URL
does not tell whether an object exists.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from console.audit import audit_denied
from console.selectors import tenant_get_for_user, tenant_list_for_user
from core.models import Tenant
from core.roles import COMPLIANCE, ENGINEER, ROLES, SUPPORT, user_roles  # noqa: F401 - the console names them here too
from core.tenancy import tenant_bind_request
from runs.engine.selectors import run_get_for_tenants
from runs.kernel.models import AgentRun


def role_required(*roles: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Sign-in first (anonymous -> the sign-in page), then one of `roles` (else 403)."""
    unknown = set(roles) - set(ROLES)
    if unknown or not roles:
        raise ValueError(f"unknown roles {sorted(unknown)}")

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not user_roles(request.user) & set(roles):
                why = f"this needs the {' or '.join(roles)} role"
                audit_denied(request, why=why, needs=roles)
                raise PermissionDenied(why)
            # Row-level security: the user's tenants (all of them for staff) for this request.
            tenant_bind_request(request, tenant_ids_for_user(request.user))
            return view(request, *args, **kwargs)

        guarded = login_required(checked)
        guarded.required_roles = tuple(roles)  # type: ignore[attr-defined]  # read by the 403 matrix test
        return guarded

    return decorate


def user_tenants(user: Any) -> QuerySet[Tenant]:
    return tenant_list_for_user(user=user)


def tenant_for_user(user: Any, tenant: str | UUID) -> Tenant:
    """The tenant named by slug or id, if the user is a member; otherwise 404."""
    found = tenant_get_for_user(user=user, tenant=tenant)
    if found is None:
        raise Http404("no such tenant")
    return found


def tenant_ids_for_user(user: Any) -> list[UUID]:
    return list(user_tenants(user).values_list("tenant_id", flat=True))


def run_for_user(user: Any, run_id: UUID | str) -> AgentRun:
    """The run, if it belongs to one of the user's tenants; otherwise 404 (no existence leak)."""
    try:
        run = run_get_for_tenants(tenant_ids=tenant_ids_for_user(user), run_id=UUID(str(run_id)))
    except ValueError:
        run = None
    if run is None:
        raise Http404("no such run")
    return run
