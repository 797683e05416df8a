"""Admin of core's models, and the read-only bases the apps use for history and evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from core.models import ApiKey, Tenant, TenantOffboarding
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


class TenantBoundAdmin(ReadOnlyAdmin):
    """Row-level security: the admin (superusers) sees every tenant's rows for the request; anyone
    else (staff without superuser) sees none of a tenant-bound table."""

    def get_queryset(self, request: HttpRequest) -> Any:
        tenants = Tenant.objects.values_list("tenant_id", flat=True) if request.user.is_superuser else []
        tenant_bind_request(request, list(tenants))
        return super().get_queryset(request)


@admin.register(Tenant)
class TenantAdmin(_TenantModelAdmin):
    list_display = ["slug", "name", "tenant_id", "created_at"]
    search_fields = ["slug", "name", "tenant_id"]
    readonly_fields = ["tenant_id", "created_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
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
