"""Django admin for runs. Events and operations are history: shown, never edited here."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from core.admin import TenantBoundAdmin
from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay
from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.workspace_models import WorkspaceMerge, WorkspaceSnapshot
from runs.external.models import ExternalWorkflow
from runs.kernel.models import AgentEvent, AgentRun, Approval, Summary, ToolOperation
from runs.webhooks.models import WebhookDelivery, WebhookSubscription


@admin.register(AgentRun)
class AgentRunAdmin(TenantBoundAdmin):
    """Runs change only through the engine's services (the console and API call them). A run's events
    are not inlined (a long run has thousands): the page links to the events list filtered by run."""

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
    readonly_fields = ["events"]

    @admin.display(description="events")
    def events(self, obj: AgentRun) -> str:
        url = reverse("admin:runs_agentevent_changelist")
        # state_revision is the seq of the run's last event: the count without counting them.
        return format_html(
            '<a href="{}?run__run_id__exact={}">{} events, in pages of {}</a>',
            url,
            obj.run_id,
            obj.state_revision,
            AgentEventAdmin.list_per_page,
        )


@admin.register(AgentEvent)
class AgentEventAdmin(TenantBoundAdmin):
    list_display = ["run_id", "seq", "event_type", "step_id", "attempt", "actor", "created_at"]
    list_filter = ["event_type"]
    search_fields = ["run__run_id"]
    list_per_page = 100
    show_full_result_count = False  # no second count of every tenant's events under a filter


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


@admin.register(Summary)
class SummaryAdmin(TenantBoundAdmin):
    """Summaries are a checked cache of events, rebuilt by the compactor; shown, never edited."""

    list_display = [
        "summary_id",
        "tenant",
        "run_id",
        "covers_from_seq",
        "covers_to_seq",
        "status",
        "token_count",
        "created_at",
    ]
    list_filter = ["status", "tenant"]
    search_fields = ["summary_id", "run__run_id"]


@admin.register(ExternalWorkflow)
class ExternalWorkflowAdmin(TenantBoundAdmin):
    """External workflows are immutable once registered (a change is a new version, through the API
    or `manage.py workflow_register_external`); shown, never edited here."""

    list_display = ["name", "version", "tenant", "created_by", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name"]


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(TenantBoundAdmin):
    """Subscriptions are made and deleted through the API or the console (audited); the signing
    secret is never shown after it was created, here neither."""

    list_display = ["url", "tenant", "event_types", "created_by", "created_at", "deleted_at"]
    list_filter = ["tenant"]
    search_fields = ["url"]
    exclude = ["secret"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(TenantBoundAdmin):
    """Deliveries are the evidence of what was sent and answered: shown, never edited."""

    list_display = [
        "event_id",
        "event_type",
        "tenant",
        "status",
        "attempts",
        "last_status_code",
        "created_at",
    ]
    list_filter = ["status", "event_type", "tenant"]
    search_fields = ["event_id", "run_id"]


@admin.register(WorkflowSchedule)
class WorkflowScheduleAdmin(TenantBoundAdmin):
    """Schedules change through the API or the console (confirmed, audited); shown here."""

    list_display = [
        "schedule_id",
        "tenant",
        "workflow_name",
        "cron",
        "interval_seconds",
        "enabled",
        "next_fire_at",
    ]
    list_filter = ["enabled", "tenant"]
    search_fields = ["schedule_id", "workflow_name"]


@admin.register(WorkspaceSnapshot)
class WorkspaceSnapshotAdmin(TenantBoundAdmin):
    """A run's workspace at a revision (manifest of content digests): evidence, never edited."""

    list_display = ["run", "seq", "tenant", "reason", "created_at"]
    list_filter = ["reason", "tenant"]
    search_fields = ["run__run_id"]


@admin.register(WorkspaceMerge)
class WorkspaceMergeAdmin(TenantBoundAdmin):
    """A branch merged back, or waiting on its conflicts: resolved on the console's merge page."""

    list_display = ["merge_id", "source", "target", "status", "tenant", "result_seq"]
    list_filter = ["status", "tenant"]
    search_fields = ["target__run_id", "source__run_id"]


@admin.register(EvalSet)
class EvalSetAdmin(TenantBoundAdmin):
    """A set of runs kept to replay with a change (the console's Evaluations page runs them)."""

    list_display = ["name", "tenant", "created_by", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name"]


@admin.register(EvalSetRun)
class EvalSetRunAdmin(TenantBoundAdmin):
    list_display = ["eval_set", "run_id", "tenant"]
    list_filter = ["tenant"]


@admin.register(EvalRound)
class EvalRoundAdmin(TenantBoundAdmin):
    list_display = ["round_id", "eval_set", "label", "tenant", "started_by", "created_at"]
    list_filter = ["tenant"]


@admin.register(RunReplay)
class RunReplayAdmin(TenantBoundAdmin):
    """A run replayed from another at a seq, with its overrides: never calls a real side effect."""

    list_display = ["run_id", "original_run_id", "at_seq", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["original_run_id"]
