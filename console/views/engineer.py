"""Engineer screens, reading: the run list (filters, search, keyset pages), the run page (lease,
timeline, paged events, operations, summaries, snapshots), the state at a revision and a diff of two.

Every view is for the engineer role and sees only the user's tenants (another tenant's run is 404).
A page's parts that htmx refreshes (the run table, the events table, the revision panel) are the
same templates the full page includes, rendered by the same view.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django import forms
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from console import engineer_queries as q
from console.roles import ENGINEER, role_required, run_for_user, user_tenants
from console.timeline import timeline_svg
from core.errors import ApplicationError
from core.models import Tenant
from runs.engine.models import Approval, RunStatus, Summary, ToolOperation
from runs.engine.resume import ACCEPTABLE_REFUSALS, run_state_change

BULK_ACTIONS = (("resume", "Resume"), ("cancel", "Cancel"), ("redispatch", "Re-dispatch"))
PAGE_SIZE, MAX_PAGE_SIZE = 50, 200
FILTER_FIELDS = ("q", "status", "workflow", "version", "tenant", "reason", "since", "until")


class RunFilterForm(forms.Form):
    """The run list's filters and cursor; the tenant choices are only the user's own tenants."""

    q = forms.CharField(required=False, max_length=200, label="Run id or idempotency key")
    status = forms.ChoiceField(required=False, choices=[("", "any"), *RunStatus.choices])
    workflow = forms.CharField(required=False, max_length=200)
    version = forms.CharField(required=False, max_length=100)
    tenant = forms.ChoiceField(required=False)
    reason = forms.CharField(required=False, max_length=200, label="Suspend reason")
    since = forms.DateTimeField(required=False, label="Updated from")
    until = forms.DateTimeField(required=False, label="Updated to")
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)
    before_at = forms.DateTimeField(required=False, widget=forms.HiddenInput)
    before_id = forms.UUIDField(required=False, widget=forms.HiddenInput)

    def __init__(self, data: Any, *, tenants: list[Tenant]) -> None:
        super().__init__(data)
        self.tenant_ids = {t.slug: t.tenant_id for t in tenants}
        cast(forms.ChoiceField, self.fields["tenant"]).choices = [
            ("", "all of mine"),
            *((t.slug, t.slug) for t in tenants),
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["tenant_id"] = self.tenant_ids.get(data.get("tenant") or "")
        if (data.get("before_at") is None) != (data.get("before_id") is None):
            raise forms.ValidationError("a page cursor needs both before_at and before_id")
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


def _htmx_target(request: HttpRequest) -> str:
    htmx = getattr(request, "htmx", None)
    return str(htmx.target or "") if htmx else ""


def _int_param(request: HttpRequest, name: str, default: int, lo: int, hi: int) -> int:
    try:
        return max(lo, min(hi, int(request.GET.get(name, default))))
    except (TypeError, ValueError):
        return default


@role_required(ENGINEER)
@require_safe
def run_list(request: HttpRequest) -> HttpResponse:
    tenants = list(user_tenants(request.user))
    form = RunFilterForm(request.GET, tenants=tenants)
    context: dict[str, Any] = {"form": form, "bulk_actions": BULK_ACTIONS}
    if not form.is_valid():
        context.update(page=None, filter_query=filter_query(None))
        return render(request, "console/engineer/run_list.html", context, status=400)
    data = form.cleaned_data
    limit = data.get("limit") or PAGE_SIZE
    before = (data["before_at"], data["before_id"]) if data.get("before_at") else None
    page = q.runs_page(tenant_ids=[t.tenant_id for t in tenants], filters=data, before=before, limit=limit)
    slugs = {t.tenant_id: t.slug for t in tenants}
    older = None
    if page.next_cursor is not None:
        at, run_id = page.next_cursor
        older = filter_query(request.GET, limit=data.get("limit"), before_at=at.isoformat(), before_id=run_id)
    context.update(
        page=page,
        rows=[(run, slugs.get(run.tenant_id, "")) for run in page.runs],
        older=older,
        first=before is not None,
        filter_query=filter_query(request.GET, limit=data.get("limit")),
    )
    template = "console/engineer/_run_table.html" if _htmx_target(request) == "run-table" else None
    return render(request, template or "console/engineer/run_list.html", context)


def _events_context(request: HttpRequest, run: Any) -> dict[str, Any]:
    limit = _int_param(request, "limit", q.EVENTS_PAGE, 1, q.MAX_EVENTS_PAGE)
    after = _int_param(request, "after_seq", 0, 0, max(run.state_revision, 0))
    events = q.events_page(run=run, after_seq=after, limit=limit)
    last = events[-1].seq if events else after
    return {
        "events": events,
        "after_seq": after,
        "limit": limit,
        "events_next": last if last < run.state_revision else None,
        "events_prev": max(0, after - limit) if after > 0 else None,
        "events_last": max(0, run.state_revision - limit),
    }


def run_page_context(request: HttpRequest, run: Any) -> dict[str, Any]:
    """Everything the run page shows (the action views re-render it with an error)."""
    base = reverse("console:run_detail", args=[run.run_id])
    buckets, marks, hidden = q.timeline_data(run=run)
    limit = _int_param(request, "limit", q.EVENTS_PAGE, 1, q.MAX_EVENTS_PAGE)
    timeline = timeline_svg(
        events=marks,
        buckets=buckets,
        hidden_marks=hidden,
        label=f"Timeline of run {run.run_id}",
        link=lambda seq: f"{base}?after_seq={max(0, seq - 1)}&limit={limit}#seq-{seq}",
    )
    fork_seq = _int_param(request, "fork_seq", run.state_revision, 1, max(run.state_revision, 1))
    lease_expired = run.lease_expires_at is not None and run.lease_expires_at < timezone.now()
    return {
        "run": run,
        "timeline": timeline,
        "lease_expired": lease_expired,
        "fork_seq": fork_seq,
        "erased": run.subject.startswith("erased:"),
        "operations": list(ToolOperation.objects.filter(run_id=run.run_id).order_by("created_at")[:100]),
        "summaries": list(
            Summary.objects.filter(run_id=run.run_id)
            .defer("text", "facts", "carry")
            .order_by("covers_from_seq")[:100]
        ),
        "approvals": list(Approval.objects.filter(run_id=run.run_id).order_by("-created_at")[:20]),
        "snapshots": q.snapshots_for(run=run),
        "forks": list(
            run.forks.only("run_id", "status", "fork_seq", "created_at").order_by("-created_at")[:20]
        ),
        "rev_a": max(1, run.state_revision - 1),
        "rev_b": run.state_revision,
        **_state_change_context(run),
        **_events_context(request, run),
    }


def _state_change_context(run: Any) -> dict[str, Any]:
    """For a run refused for a changed state or history: both digests and the diff to accept."""
    if run.status != "suspended" or run.suspend_reason not in ACCEPTABLE_REFUSALS:
        return {}
    try:
        change = run_state_change(run=run)
    except ApplicationError as exc:
        return {"state_change_error": exc.message}
    entries, cut = q.json_diff(change.committed_state, change.current_state)
    return {
        "state_change": change,
        "state_change_entries": entries,
        "state_change_cut": cut,
        "state_change_limit": q.MAX_DIFF_ENTRIES,
    }


@role_required(ENGINEER)
@require_safe
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    if _htmx_target(request) == "events":
        return render(request, "console/engineer/_events.html", {"run": run, **_events_context(request, run)})
    return render(request, "console/engineer/run_detail.html", run_page_context(request, run))


def _revision_page(
    request: HttpRequest, run: Any, fragment: str, page: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    in_panel = _htmx_target(request) == "revision-panel"
    return render(request, fragment if in_panel else page, {"run": run, **context}, status=status)


@role_required(ENGINEER)
@require_safe
def run_state(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """The state right after one event, with that event's digest and whether the state matches it."""
    run = run_for_user(request.user, run_id)
    fragment, page = "console/engineer/_state.html", "console/engineer/state.html"
    try:
        revision = q.revision_parse(request.GET.get("rev", run.state_revision), run=run)
        found = q.state_at(run=run, revision=revision)
    except ApplicationError as exc:
        return _revision_page(request, run, fragment, page, {"error": exc.message}, status=exc.http_status)
    return _revision_page(request, run, fragment, page, {"found": found})


@role_required(ENGINEER)
@require_safe
def run_diff(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """What changed in the state between two revisions (loads exactly those two states)."""
    run = run_for_user(request.user, run_id)
    fragment, page = "console/engineer/_diff.html", "console/engineer/diff.html"
    try:
        a = q.revision_parse(request.GET.get("a", ""), run=run, name="revision a")
        b = q.revision_parse(request.GET.get("b", ""), run=run, name="revision b")
        old, new = q.state_at(run=run, revision=a), q.state_at(run=run, revision=b)
    except ApplicationError as exc:
        return _revision_page(request, run, fragment, page, {"error": exc.message}, status=exc.http_status)
    entries, cut = q.json_diff(old.state, new.state)
    context = {"old": old, "new": new, "entries": entries, "cut": cut, "limit": q.MAX_DIFF_ENTRIES}
    return _revision_page(request, run, fragment, page, context)


@role_required(ENGINEER)
@require_safe
def summary_check(request: HttpRequest, run_id: UUID, summary_id: UUID) -> HttpResponse:
    """One summary's check against its source events (loaded lazily: a big run has many summaries)."""
    run = run_for_user(request.user, run_id)
    summary = Summary.objects.filter(run_id=run.run_id, summary_id=summary_id).first()
    if summary is None:
        raise Http404("no such summary")
    in_row = _htmx_target(request).startswith("summary-")
    template = "console/engineer/_summary_check.html" if in_row else "console/engineer/summary_check.html"
    return render(request, template, {"run": run, "summary": summary, "check": q.summary_check(summary)})
