"""Admin of core's models, and the read-only bases the apps use for history and evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.contrib import admin, messages
from django.db.models import Model
from django.http import HttpRequest, QueryDict

from core.models import ApiKey, StoredArtifact, Tenant, TenantOffboarding
from core.tenancy import tenant_bind_request

if TYPE_CHECKING:  # ModelAdmin is generic in the stubs only: Django gives it no __class_getitem__
    _ModelAdmin = admin.ModelAdmin[Model]
    _TenantModelAdmin = admin.ModelAdmin[Tenant]
else:
    _ModelAdmin = _TenantModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    """For history and evidence (events, operations, ledgers): shown in the admin, never edited there."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_tenants_bind(request: HttpRequest) -> None:
    """Row-level security for an admin request: every tenant for a superuser, none for anyone else."""
    tenants = Tenant.objects.values_list("tenant_id", flat=True) if request.user.is_superuser else []
    tenant_bind_request(request, list(tenants))


class TenantBoundAdmin(ReadOnlyAdmin):
    """Row-level security: the admin (superusers) sees every tenant's rows for the request; anyone
    else (staff without superuser) sees none of a tenant-bound table."""

    def get_queryset(self, request: HttpRequest) -> Any:
        admin_tenants_bind(request)
        return super().get_queryset(request)


class OneTenantAdmin(TenantBoundAdmin):
    """For memory and retrieval, whose row-level security takes one tenant at a time: the admin
    shows the tenant chosen in the list's tenant filter (kept when a row is opened), else the first
    tenant by slug, and says so."""

    def _tenant(self, request: HttpRequest) -> Tenant | None:
        wanted = request.GET.get("tenant__tenant_id__exact") or QueryDict(
            request.GET.get("_changelist_filters", "")
        ).get("tenant__tenant_id__exact")
        tenants = Tenant.objects.order_by("slug")
        chosen = tenants.filter(tenant_id=wanted).first() if wanted and _is_uuid(wanted) else None
        return chosen or tenants.first()

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = list(super().get_list_filter(request))
        return filters if "tenant" in filters else [*filters, "tenant"]

    def get_queryset(self, request: HttpRequest) -> Any:
        tenant = self._tenant(request) if request.user.is_superuser else None
        tenant_bind_request(request, [tenant.tenant_id] if tenant is not None else [])
        return super(TenantBoundAdmin, self).get_queryset(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        tenant = self._tenant(request) if request.user.is_superuser else None
        if tenant is not None and "tenant__tenant_id__exact" not in request.GET:
            messages.info(
                request,
                f"Each tenant's rows are kept apart in the database: showing tenant {tenant.slug}. "
                "Choose another in the tenant filter.",
            )
        return super().changelist_view(request, extra_context)


def _is_uuid(value: str | None) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return value is not None


@admin.register(Tenant)
class TenantAdmin(_TenantModelAdmin):
    list_display = ["slug", "name", "tenant_id", "created_at"]
    search_fields = ["slug", "name", "tenant_id"]
    readonly_fields = ["tenant_id", "created_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(TenantBoundAdmin):
    """Keys are made and revoked with `manage.py api_key`; the admin shows which exist. The secret is
    never stored, and its SHA-256 is left out here too (only the public prefix is shown)."""

    list_display = ["prefix", "name", "tenant", "scope", "created_at", "revoked_at"]
    list_filter = ["scope", "tenant"]
    search_fields = ["prefix", "name"]
    exclude = ["secret_sha256"]


@admin.register(TenantOffboarding)
class TenantOffboardingAdmin(ReadOnlyAdmin):
    """Offboarding receipts: evidence, kept after the tenant is gone (no row-level security)."""

    list_display = ["offboarding_id", "tenant_slug", "status", "requested_by", "created_at", "completed_at"]
    list_filter = ["status"]
    search_fields = ["tenant_slug", "tenant_id", "offboarding_id"]


@admin.register(StoredArtifact)
class StoredArtifactAdmin(TenantBoundAdmin):
    """The blobs Keeper stored, one row per tenant and digest: where each is and when the reclaim
    sweep last found it referenced. Reclaim and erasure remove them; the admin only shows them."""

    list_display = ["digest", "tenant", "store", "size", "created_at", "touched_at", "checked_at"]
    list_filter = ["store", "tenant"]
    search_fields = ["digest", "key"]
