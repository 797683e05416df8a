"""Admin of core's models, and the read-only base the apps use for history and evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from core.models import Tenant

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


@admin.register(Tenant)
class TenantAdmin(_TenantModelAdmin):
    list_display = ["slug", "name", "tenant_id", "created_at"]
    search_fields = ["slug", "name", "tenant_id"]
    readonly_fields = ["tenant_id", "created_at"]
