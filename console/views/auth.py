"""Sign-in with throttling, sign-out, the home page (each role's first screen), and the audit log
(filters, pages, CSV export)."""

from __future__ import annotations

import csv
import json
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.audit import actor_of, audit_record, audit_target_url, csv_cell
from console.forms import TenantFilterForm
from console.htmx import HtmxHttpRequest
from console.roles import (
    COMPLIANCE,
    ENGINEER,
    SUPPORT,
    role_required,
    tenant_ids_for_user,
    user_roles,
    user_tenants,
)
from console.selectors import (
    AUDIT_ORDERS,
    AuditFilters,
    audit_entries,
    audit_entry_page,
    offboardings_of_member,
)
from console.sign_in import sign_in_failure_record, sign_in_throttled
from console.sorting import sort_headers
from core.pagination import CursorInvalid

AUDIT_PAGE = 50


@require_http_methods(["GET", "POST"])
def sign_in(request: HtmxHttpRequest) -> HttpResponse:
    next_url = request.POST.get("next") or request.GET.get("next") or "/"
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = "/"
    form = AuthenticationForm(request, data=request.POST if request.method == "POST" else None)
    throttled = False
    if request.method == "POST":
        username = str(request.POST.get("username", ""))
        remote = request.META.get("REMOTE_ADDR", "")
        if sign_in_throttled(username=username, remote_addr=remote):
            throttled = True
            form.errors.clear()
        elif form.is_valid():
            login(request, form.get_user())
            audit_record(request=request, action="sign_in", target_type="user", target_id=username)
            _told_of_offboarding(request)
            return redirect(next_url)
        else:
            sign_in_failure_record(request=request, username=username)
    status = 429 if throttled else 200
    return render(
        request,
        "console/sign_in.html",
        {
            "form": form,
            "next": next_url,
            "throttled": throttled,
            "window_minutes": settings.KEEPER_LOGIN_WINDOW // 60,
        },
        status=status,
    )


def _told_of_offboarding(request: HtmxHttpRequest) -> None:
    """A user left with no tenant because theirs was offboarded is told so, not shown empty pages."""
    user = request.user
    if user.pk is None or user.is_superuser or user_tenants(user).exists():
        return
    for entry in offboardings_of_member(user_id=user.pk):
        name = entry.details.get("name") or entry.details.get("slug", "")
        messages.warning(
            request,
            f"Your tenant {name} ({entry.details.get('slug', '')}) was offboarded on {entry.at:%Y-%m-%d}: "
            "its data is erased, and you are a member of no other tenant. Ask an administrator if you "
            "need access to another one.",
            extra_tags="offboarded",
        )


@require_POST
def sign_out(request: HtmxHttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        audit_record(
            request=request, action="sign_out", target_type="user", target_id=request.user.get_username()
        )
    logout(request)
    return redirect("console:sign_in")


@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    roles = user_roles(request.user)
    for role, target in (
        (SUPPORT, "console:support_inbox"),
        (ENGINEER, "console:run_list"),
        (COMPLIANCE, "console:compliance_home"),
    ):
        if role in roles:
            return redirect(target)
    return render(request, "console/no_role.html", status=403)


KNOWN_ACTIONS = (
    "approve",
    "reject",
    "lookup",
    "reconcile",
    "resume",
    "cancel",
    "redispatch",
    "fork",
    "rewind",
    "merge",
    "merge_resolve",
    "merge_abandon",
    "accept_state",
    "erase",
    "langgraph_answer",
    "langgraph_fork",
    "sign_in",
    "sign_out",
    "audit_export",
)
DATE_FORMAT = "%Y-%m-%d"  # typed dates (the browser's date input sends this format too)
EXPORT_MAX = 50_000  # entries one CSV may hold; a bigger export must be narrowed first
CSV_COLUMNS = ("id", "at_utc", "actor", "tenant", "action", "target_type", "target_id", "note", "details")


class AuditFilterForm(TenantFilterForm):
    """The audit log's filters; the tenant choices are only the user's own tenants."""

    field_order = ["actor", "action", "tenant", "target", "since", "until"]

    actor = forms.CharField(required=False, max_length=200, label="Actor (user name)")
    action = forms.CharField(required=False, max_length=100)
    target = forms.CharField(required=False, max_length=200, label="Target id")
    since = forms.DateField(
        required=False,
        input_formats=[DATE_FORMAT],
        label="From (a day, UTC)",
        widget=forms.DateInput(attrs={"type": "date", "placeholder": "YYYY-MM-DD"}, format=DATE_FORMAT),
        error_messages={"invalid": "Enter a date as YYYY-MM-DD, e.g. 2026-03-01."},
    )
    until = forms.DateField(
        required=False,
        input_formats=[DATE_FORMAT],
        label="To (a day, UTC, inclusive)",
        widget=forms.DateInput(attrs={"type": "date", "placeholder": "YYYY-MM-DD"}, format=DATE_FORMAT),
        error_messages={"invalid": "Enter a date as YYYY-MM-DD, e.g. 2026-03-31."},
    )
    sort = forms.ChoiceField(required=False, choices=[(o, o) for o in AUDIT_ORDERS], widget=forms.HiddenInput)
    # The page's start: the last entry of the page before, in this order (ListOrder.encode).
    cursor = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("'From' is after 'To'.")
        data["order"] = order = data.get("sort") or "when"
        data["after"] = None
        if data.get("cursor"):
            try:
                data["after"] = AUDIT_ORDERS[order].decode(order, data["cursor"])
            except CursorInvalid as exc:
                raise forms.ValidationError(str(exc)) from exc
        return data

    def filters(self) -> AuditFilters:
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        return AuditFilters(
            actor=data.get("actor", ""),
            action=data.get("action", ""),
            tenant_id=self.tenant_ids.get(data.get("tenant") or ""),
            target=data.get("target", ""),
            since=datetime.combine(since, time.min, tzinfo=UTC) if since else None,
            # The day after 9999-12-31 does not exist (a 500): no upper bound then.
            until=datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC)
            if until and until < date.max
            else None,
        )

    def query(self, **extra: Any) -> str:
        """The filters and the order as a query string (for the pager, the headers and the export
        link); `extra` adds to them or replaces one (a header's `sort`)."""
        query = QueryDict(mutable=True)
        for name in ("target", "actor", "action", "tenant", "since", "until", "sort"):
            value = self.data.get(name, "")
            if value and name not in extra:
                query[name] = str(value)[:200]
        for name, value in extra.items():
            query[name] = str(value)
        return query.urlencode()


def _audit_scope(request: HtmxHttpRequest) -> list[UUID] | None:
    return None if request.user.is_superuser else tenant_ids_for_user(request.user)


def _audit_form(request: HtmxHttpRequest) -> AuditFilterForm:
    return AuditFilterForm(request.GET, tenants=list(user_tenants(request.user)))


def _audit_page(
    request: HtmxHttpRequest, form: AuditFilterForm, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {"form": form, "known_actions": KNOWN_ACTIONS, "query": form.query(), **extra}
    return render(request, "console/audit_log.html", context, status=status)


# The audit log's sortable columns: a first click's order, and the reverse (AUDIT_ORDERS).
AUDIT_SORTS = {
    "when": ("when", "when_asc"),
    "actor": ("actor", "actor_desc"),
    "tenant": ("tenant", "tenant_desc"),
    "action": ("action", "action_desc"),
}


@role_required(SUPPORT, COMPLIANCE, ENGINEER)
@require_safe
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    """The audit entries of the user's tenants and the user's own (sign-ins); a superuser sees all.
    Filters: actor, action, tenant, target and a date range (bad values are form errors, 422).
    Keyset pages in the chosen order (`sort`, newest first by default): `cursor` is where a page starts;
    a cursor of another order or edited by hand is a form error too."""
    form = _audit_form(request)
    if not form.is_valid():
        return _audit_page(request, form, status=422, page=None)
    order = form.cleaned_data["order"]
    page = audit_entry_page(
        tenant_ids=_audit_scope(request),
        actor=actor_of(request),
        cursor=form.cleaned_data["after"],
        limit=AUDIT_PAGE,
        filters=form.filters(),
        order=order,
    )
    roles = user_roles(request.user)
    rows = [(entry, audit_target_url(entry, roles)) for entry in page.rows]
    cursor = AUDIT_ORDERS[order].encode(order, page.next_cursor) if page.next_cursor else ""
    headers = sort_headers(
        order=order,
        sorts=AUDIT_SORTS,
        descending=lambda o: AUDIT_ORDERS[o].descending,
        link=lambda o: form.query(sort=o),
    )
    return _audit_page(
        request,
        form,
        page=page,
        rows=rows,
        older_query=form.query(cursor=cursor) if cursor else "",
        first=form.cleaned_data["after"] is not None,
        sort_headers=headers,
    )


@role_required(SUPPORT, COMPLIANCE, ENGINEER)
@require_safe
def audit_export(request: HtmxHttpRequest) -> HttpResponse:
    """The filtered entries as CSV (the same filters and scope as the page; the export is itself
    audited). Cells that a spreadsheet would run as a formula start with an apostrophe."""
    form = _audit_form(request)
    if not form.is_valid():
        return _audit_page(request, form, status=422, page=None)
    entries = list(
        audit_entries(
            tenant_ids=_audit_scope(request),
            actor=actor_of(request),
            filters=form.filters(),
            order=form.cleaned_data["order"],  # the order the page shows
        )[: EXPORT_MAX + 1]
    )
    if len(entries) > EXPORT_MAX:
        form.add_error(
            None, f"More than {EXPORT_MAX:,} entries match: narrow the dates or filters to export."
        )
        return _audit_page(request, form, status=422, page=None)
    audit_record(
        request=request,
        action="audit_export",
        target_type="audit_log",
        details={
            "filters": {k: v for k, v in request.GET.items() if k in form.fields},
            "entries": len(entries),
        },
    )
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="keeper-audit.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for e in entries:
        details = json.dumps(e.details, ensure_ascii=False, sort_keys=True) if e.details else ""
        tenant = e.tenant.slug if e.tenant else ""
        row = (e.id, e.at.astimezone(UTC).isoformat(), e.actor, tenant, e.action, e.target_type, e.target_id)
        writer.writerow([csv_cell(value) for value in (*row, e.note, details)])
    return response
