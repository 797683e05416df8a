"""Admin for console access: who belongs to which tenant (roles are Django groups), and the audit
log, shown read-only (the database refuses changes to it anyway)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from console.models import AuditEntry, Membership
from console.sign_in import ThrottledAdminAuthenticationForm
from core.admin import ReadOnlyAdmin, admin_tenants_bind

# The admin's sign-in is throttled and audited like the console's (a superuser sees every tenant).
admin.site.login_form = ThrottledAdminAuthenticationForm


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Memberships are under row-level security: a superuser's request reads and writes every
    tenant's (bound before the list and before the form, whose uniqueness check reads the table)."""

    list_display = ["user", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]

    def get_queryset(self, request: HttpRequest) -> Any:
        admin_tenants_bind(request)
        return super().get_queryset(request)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        admin_tenants_bind(request)
        return super().get_form(request, obj, change, **kwargs)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "tenant", "action", "target_type", "target_id", "note"]
    list_filter = ["action", "target_type", "tenant"]
    search_fields = ["actor", "target_id", "note"]
