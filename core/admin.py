from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.models import Tenant


class ReadOnlyAdmin(admin.ModelAdmin):
    """For history and evidence (events, operations, ledgers): shown in the admin, never edited there."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "tenant_id", "created_at"]
    search_fields = ["slug", "name", "tenant_id"]
    readonly_fields = ["tenant_id", "created_at"]
