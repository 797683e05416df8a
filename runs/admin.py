"""Django admin for runs. Events and operations are history: shown, never edited here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.admin import ReadOnlyAdmin
from core.models import Tenant
from core.tenancy import tenant_bind_request
from runs.engine.models import AgentEvent, AgentRun, Approval, ToolOperation

_EVENT_FIELDS = ("seq", "event_type", "step_id", "attempt", "actor", "state_digest", "created_at")


class AgentEventInline(admin.TabularInline):
    model = AgentEvent
    fields = _EVENT_FIELDS
    readonly_fields = _EVENT_FIELDS
    extra = 0
    can_delete = False
    ordering = ["seq"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TenantBoundAdmin(ReadOnlyAdmin):
    """Row-level security: the admin (superusers) sees every tenant's runs for the request."""

    def get_queryset(self, request: HttpRequest) -> Any:
        tenants = Tenant.objects.values_list("tenant_id", flat=True) if request.user.is_superuser else []
        tenant_bind_request(request, list(tenants))
        return super().get_queryset(request)


@admin.register(AgentRun)
class AgentRunAdmin(TenantBoundAdmin):
    """Runs change only through the engine's services (the console and API call them)."""

    list_display = [
        "run_id",
        "tenant",
        "workflow_name",
        "workflow_version",
        "status",
        "next_step",
        "state_revision",
        "suspend_reason",
        "lease_owner",
        "updated_at",
    ]
    list_filter = ["status", "workflow_name", "suspend_reason", "tenant"]
    search_fields = ["run_id", "idempotency_key"]
    inlines = [AgentEventInline]


@admin.register(AgentEvent)
class AgentEventAdmin(TenantBoundAdmin):
    list_display = ["run_id", "seq", "event_type", "step_id", "attempt", "actor", "created_at"]
    list_filter = ["event_type"]
    search_fields = ["run__run_id"]


@admin.register(ToolOperation)
class ToolOperationAdmin(TenantBoundAdmin):
    list_display = ["operation_id", "tenant", "run_id", "tool_name", "status", "external_ref", "updated_at"]
    list_filter = ["status", "tool_name"]
    search_fields = ["operation_id", "external_ref"]


@admin.register(Approval)
class ApprovalAdmin(TenantBoundAdmin):
    """Decisions go through the approval services (they check expiry and write the run's event)."""

    list_display = ["approval_id", "tenant", "run_id", "status", "request_digest", "expires_at", "decided_by"]
    list_filter = ["status", "tenant"]
    search_fields = ["approval_id", "run__run_id", "request_digest"]
