"""Engineer screens, reading: the run list (filters, search, keyset pages), the run page (lease,
timeline, paged events, operations, summaries, snapshots), the state at a revision and a diff of two.

Every view is for the engineer role and sees only the user's tenants (another tenant's run is 404).
A page's parts that htmx refreshes (the run table, the events table, the revision panel) are
partials of the page's template (`page.html#name`), rendered by the same view with the same context.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from django import forms
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from console.declarations import run_signals_and_queries
from console.display import MAX_DIFF_ENTRIES, events_formatted, json_diff
from console.forms import TenantFilterForm
from console.htmx import HtmxHttpRequest, htmx_target
from console.live import POLL_SECONDS, rows_live_key
from console.roles import ENGINEER, role_required, run_for_user, user_tenants
from console.sorting import sort_headers
from console.steps import run_steps, step_changes
from console.timeline import (
    DEFAULT_BUCKETS,
    MARKED_EVENT_TYPES,
    Bucket,
    TimelineEvent,
    duration_text,
    timeline_svg,
)
from core.errors import ApplicationError
from core.pagination import CursorInvalid
from retrieval.selectors import retrieval_snapshot_list
from runs.conversations import selectors as conversations
from runs.engine.registry import registry
from runs.engine.resume import ACCEPTABLE_REFUSALS, run_state_change
from runs.engine.selectors import (
    RUN_ORDERS,
    RevisionState,
    approval_run_list,
    child_list,
    event_buckets,
    event_marked_list,
    event_page,
    fork_list,
    merge_list,
    operation_run_list,
    revision_parse,
    run_cursor_decode,
    run_cursor_encode,
    run_filtered_page,
    run_input,
    run_state_at,
)
from runs.kernel.models import TERMINAL_RUN_STATUSES, AgentRun, RunStatus

BULK_ACTIONS = (("resume", "Resume"), ("cancel", "Cancel"), ("redispatch", "Re-dispatch"))
PAGE_SIZE, MAX_PAGE_SIZE = 50, 200
EVENTS_PAGE, MAX_EVENTS_PAGE = 200, 500
MAX_MARKS = 400  # marked events drawn on one timeline (the newest)
MAX_STEPS = 400  # step executions drawn on one timeline (the newest)
STEPS_SHOWN = 50  # of them, rows in the run page's steps table (the newest)
LOCAL_INPUT_FORMAT = "%Y-%m-%dT%H:%M"  # what the browser's datetime-local input sends and shows
FILTER_FIELDS = (
    "q",
    "status",
    "workflow",
    "version",
    "tenant",
    "subject",
    "reason",
    "since",
    "until",
    "sort",
)
# The run list's sortable columns, each with the order a first click asks for (times newest first,
# text A to Z) and the one a click asks for when the list is in that order already (RUN_ORDERS).
SORTS = {
    "tenant": ("tenant", "tenant_desc"),
    "workflow": ("workflow", "workflow_desc"),
    "status": ("status", "status_desc"),
    "started": ("started", "started_asc"),
    "subject": ("subject", "subject_desc"),
    "updated": ("updated", "updated_asc"),
}


class RunFilterForm(TenantFilterForm):
    """The run list's filters and cursor; the tenant choices are only the user's own tenants."""

    field_order = ["q", "status", "workflow", "version", "tenant", "subject", "reason", "since", "until"]

    q = forms.CharField(required=False, max_length=200, label="Run id or idempotency key")
    status = forms.ChoiceField(required=False, choices=[("", "any"), *RunStatus.choices])
    workflow = forms.CharField(required=False, max_length=200)
    version = forms.CharField(required=False, max_length=100)
    subject = forms.CharField(required=False, max_length=200, label="Subject id")
    reason = forms.CharField(required=False, max_length=200, label="Suspend reason (text in it)")
    since = forms.DateTimeField(
        required=False,
        label="Updated from (YYYY-MM-DD HH:MM, UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL_INPUT_FORMAT),
        error_messages={"invalid": "Enter a time as YYYY-MM-DD HH:MM (or a date, YYYY-MM-DD)."},
    )
    until = forms.DateTimeField(
        required=False,
        label="Updated to (YYYY-MM-DD HH:MM, UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL_INPUT_FORMAT),
        error_messages={"invalid": "Enter a time as YYYY-MM-DD HH:MM (or a date, YYYY-MM-DD)."},
    )
    sort = forms.ChoiceField(required=False, choices=[(o, o) for o in RUN_ORDERS], widget=forms.HiddenInput)
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)
    # The page's start: the last row of the page before, in this order (run_cursor_encode).
    cursor = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["tenant_id"] = self.tenant_ids.get(data.get("tenant") or "")
        data["order"] = data.get("sort") or "updated"
        data["after"] = None
        if data.get("cursor"):
            try:
                data["after"] = run_cursor_decode(order=data["order"], token=data["cursor"])
            except CursorInvalid as exc:
                raise forms.ValidationError(str(exc)) from exc
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("'updated from' is after 'updated to'")
        return data


def filter_query(data: Any, **extra: Any) -> str:
    """The filter part of a query string (to carry the filter into links and the bulk forms)."""
    query = QueryDict(mutable=True)
    for name in FILTER_FIELDS:
        value = data.get(name, "") if data is not None else ""
        if value:
            query[name] = str(value)[:200]
    for name, value in extra.items():
        if value not in (None, ""):
            query[name] = str(value)
    return query.urlencode()


def _int_param(request: HtmxHttpRequest, name: str, default: int, lo: int, hi: int) -> int:
    try:
        return max(lo, min(hi, int(request.GET.get(name, default))))
    except (TypeError, ValueError):
        return default


@role_required(ENGINEER)
@require_safe
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    tenants = list(user_tenants(request.user))
    form = RunFilterForm(request.GET, tenants=tenants)
    context: dict[str, Any] = {"form": form, "bulk_actions": BULK_ACTIONS}
    if not form.is_valid():
        context.update(page=None, filter_query=filter_query(None))
        return render(request, "console/engineer/run_list.html", context, status=422)
    data = form.cleaned_data
    limit = data.get("limit") or PAGE_SIZE
    order = data["order"]
    page = run_filtered_page(
        tenant_ids=[t.tenant_id for t in tenants],
        filters=data,
        cursor=data["after"],
        limit=limit,
        order=order,
    )
    slugs = {t.tenant_id: t.slug for t in tenants}
    older = None
    if page.more and page.next_cursor is not None:  # the last row's (value of the order, run_id)
        older = filter_query(
            request.GET,
            limit=data.get("limit"),
            cursor=run_cursor_encode(order=order, cursor=page.next_cursor),
        )
    live_key = rows_live_key(page.rows)
    if htmx_target(request) == "run-table" and request.GET.get("live") == live_key:
        return HttpResponse(status=204)  # the live poll: nothing changed, nothing is redrawn
    this_page = filter_query(request.GET, limit=data.get("limit"), cursor=data.get("cursor"))
    now = timezone.now()
    context.update(
        page=page,
        order=order,
        sort_headers=sort_headers(
            order=order,
            sorts=SORTS,
            descending=lambda o: RUN_ORDERS[o].descending,
            link=lambda o: filter_query(request.GET, limit=data.get("limit"), sort=o),
        ),
        first=data["after"] is not None,
        rows=[(run, slugs.get(run.tenant_id, ""), run_duration(run, now)) for run in page.rows],
        older=older,
        filter_query=filter_query(request.GET, limit=data.get("limit")),
        live_query=f"{this_page}&live={live_key}" if this_page else f"live={live_key}",
        poll_seconds=POLL_SECONDS,
    )
    partial = "#run-table" if htmx_target(request) == "run-table" else ""
    return render(request, f"console/engineer/run_list.html{partial}", context)


def run_duration(run: AgentRun, now: datetime) -> str:
    """How long the run has taken: from its start to its last commit once it ended, to now while it
    runs or waits."""
    ended = run.status in TERMINAL_RUN_STATUSES
    return duration_text(((run.updated_at if ended else now) - run.created_at).total_seconds()) + (
        "" if ended else " so far"
    )


def _events_context(request: HtmxHttpRequest, run: AgentRun) -> dict[str, Any]:
    limit = _int_param(request, "limit", EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
    # ?focus=N: the page of events that holds event N, the event marked (a link from a claim's
    # provenance or the timeline names one event).
    focus = _int_param(request, "focus", 0, 0, max(run.state_revision, 0)) or None
    default_after = max(0, focus - 1 - limit // 2) if focus else 0
    after = _int_param(request, "after_seq", default_after, 0, max(run.state_revision, 0))
    page = event_page(run=run, after_seq=after, limit=limit)
    events = events_formatted(page.rows)
    last = events[-1].seq if events else after
    return {
        "events": events,
        "focus": focus,
        "after_seq": after,
        "limit": limit,
        "events_next": last if page.more else None,
        "events_prev": max(0, after - limit) if after > 0 else None,
        "events_last": max(0, run.state_revision - limit),
        # Forks and rewinds are the engine's: a run its own process drives offers neither.
        "forkable": not registry.outside(run.workflow_name),
    }


def request_token() -> str:
    """A rendered fork or rewind form's idempotency key: the form sent twice makes one run."""
    return uuid4().hex


def run_page_context(request: HtmxHttpRequest, run: AgentRun) -> dict[str, Any]:
    """Everything the run page shows (the action views re-render it with an error)."""
    base = reverse("console:run_detail", args=[run.run_id])
    marks, hidden = event_marked_list(run=run, event_types=MARKED_EVENT_TYPES, limit=MAX_MARKS)
    limit = _int_param(request, "limit", EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
    steps = run_steps(run=run, limit=MAX_STEPS)
    timeline = timeline_svg(
        events=[TimelineEvent(*mark) for mark in marks],
        buckets=[Bucket(*bucket) for bucket in event_buckets(run=run, count=DEFAULT_BUCKETS)],
        steps=steps.bars,
        waits=steps.waits,
        hidden_marks=hidden,
        hidden_steps=steps.more,
        label=f"Timeline of run {run.run_id}",
        link=lambda seq: f"{base}?after_seq={max(0, seq - 1)}&limit={limit}#seq-{seq}",
    )
    fork_seq = _int_param(request, "fork_seq", run.state_revision, 1, max(run.state_revision, 1))
    lease_expired = run.lease_expires_at is not None and run.lease_expires_at < timezone.now()
    shown = steps.rows[-STEPS_SHOWN:]
    signals, queries = run_signals_and_queries(run)
    return {
        "run": run,
        "run_input": run_input(run=run),
        "timeline": timeline,
        "steps": shown,
        "step_changes": step_changes(run=run, rows=shown),
        "steps_more": steps.more or len(steps.rows) > STEPS_SHOWN,
        "signals": signals,
        "queries": queries,
        # A resume refused for a changed state is refused again until the state is accepted: the
        # page offers the acceptance, not a Resume that could only fail.
        "resume_blocked": run.status == RunStatus.SUSPENDED and run.suspend_reason in ACCEPTABLE_REFUSALS,
        "events_limit": limit,
        "lease_expired": lease_expired,
        "fork_seq": fork_seq,
        "request_token": request_token(),
        "erased": run.subject.startswith("erased:"),
        "driven_outside": registry.outside(run.workflow_name),
        "operations": operation_run_list(run=run),
        "summaries": conversations.summary_list(run=run),
        "approvals": approval_run_list(run=run),
        "snapshots": retrieval_snapshot_list(tenant_id=run.tenant_id, run_id=run.run_id),
        "forks": fork_list(run=run),
        "children": child_list(run=run),
        "merges": merge_list(run=run),
        "rev_a": max(1, run.state_revision - 1),
        "rev_b": run.state_revision,
        **_state_change_context(run),
        **_events_context(request, run),
    }


def _state_change_context(run: AgentRun) -> dict[str, Any]:
    """For a run refused for a changed state or history: both digests and the diff to accept."""
    if run.status != "suspended" or run.suspend_reason not in ACCEPTABLE_REFUSALS:
        return {}
    try:
        change = run_state_change(run=run)
    except ApplicationError as exc:
        return {"state_change_error": exc.message}
    entries, cut = json_diff(change.committed_state, change.current_state)
    return {
        "state_change": change,
        "state_change_entries": entries,
        "state_change_cut": cut,
        "state_change_limit": MAX_DIFF_ENTRIES,
    }


@role_required(ENGINEER)
@require_safe
def run_detail(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    if htmx_target(request) == "events":
        return render(
            request, "console/engineer/run_detail.html#events", {"run": run, **_events_context(request, run)}
        )
    return render(request, "console/engineer/run_detail.html", run_page_context(request, run))


def _revision_page(
    request: HtmxHttpRequest, run: AgentRun, page: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    partial = "#revision-panel" if htmx_target(request) == "revision-panel" else ""
    return render(request, f"{page}{partial}", {"run": run, **context}, status=status)


def _state_at(run: AgentRun, revision: int) -> RevisionState:
    found = run_state_at(run=run, revision=revision)
    if found.digest_ok is False and conversations.revision_state_erased(run=run, state_seq=found.state_seq):
        return replace(found, erased=True)
    return found


@role_required(ENGINEER)
@require_safe
def run_state(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """The state right after one event, with that event's digest and whether the state matches it."""
    run = run_for_user(request.user, run_id)
    page = "console/engineer/state.html"
    try:
        revision = revision_parse(request.GET.get("rev", run.state_revision), run=run)
        found = _state_at(run, revision)
    except ApplicationError as exc:
        return _revision_page(request, run, page, {"error": exc.message}, status=exc.http_status)
    return _revision_page(request, run, page, {"found": found})


@role_required(ENGINEER)
@require_safe
def run_diff(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """What changed in the state between two revisions (loads exactly those two states)."""
    run = run_for_user(request.user, run_id)
    page = "console/engineer/diff.html"
    try:
        a = revision_parse(request.GET.get("a", ""), run=run, name="revision a")
        b = revision_parse(request.GET.get("b", ""), run=run, name="revision b")
        old, new = _state_at(run, a), _state_at(run, b)
    except ApplicationError as exc:
        return _revision_page(request, run, page, {"error": exc.message}, status=exc.http_status)
    entries, cut = json_diff(old.state, new.state)
    context = {"old": old, "new": new, "entries": entries, "cut": cut, "limit": MAX_DIFF_ENTRIES}
    return _revision_page(request, run, page, context)


@role_required(ENGINEER)
@require_safe
def summary_check(request: HtmxHttpRequest, run_id: UUID, summary_id: UUID) -> HttpResponse:
    """One summary's check against its source events (loaded lazily: a big run has many summaries)."""
    run = run_for_user(request.user, run_id)
    summary = conversations.summary_get(run=run, summary_id=summary_id)
    if summary is None:
        raise Http404("no such summary")
    partial = "#check" if htmx_target(request).startswith("summary-") else ""
    context = {"run": run, "summary": summary, "check": conversations.summary_check(summary=summary)}
    return render(request, f"console/engineer/summary_check.html{partial}", context)
