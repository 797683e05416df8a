"""Engineer actions: resume, cancel, re-dispatch, fork and rewind one run, and resume / cancel /
re-dispatch every run of a filter (a dry run first, then a confirmed POST; one audit entry per run).

Each action is a POST on a run of the user's tenants (else 404), done by one run service (which
writes the run event with the actor and note) together with its audit entry in one transaction;
a refusal shows the service's message with its 4xx status and records nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.core import signing
from django.db import transaction
from django.db.models import Q
from django.http import HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, run_for_user, user_tenants
from console.views.engineer import FILTER_FIELDS, RunFilterForm, filter_query, request_token, run_page_context
from core.errors import ApplicationError
from runs.engine.dispatch import run_enqueue
from runs.engine.forks import run_fork_once, run_rewind
from runs.engine.resume import ACCEPTABLE_REFUSALS, run_state_accept
from runs.engine.runs import run_cancel, run_resume
from runs.engine.selectors import LIST_FIELDS, run_count_capped, run_filtered
from runs.kernel.errors import InvalidTransition
from runs.kernel.models import SUBJECT_ERASED, AgentRun, RunStatus
from runs.langgraph.store import WORKFLOW as LANGGRAPH

NOTE_MAX = 2000
BULK_CAP = 1000  # runs one bulk action may touch; a bigger set must be narrowed first
PREVIEW = 50
TOKEN_SALT, TOKEN_AGE = "console.engineer.bulk", 3600


class BrokerUnreachable(ApplicationError):
    code = "broker_unreachable"
    http_status = 503


def _redispatch(*, run_id: UUID, actor: str, note: str = "") -> Any:
    """Send a runnable run a new wake-up (PostgreSQL still decides whether it runs)."""
    row: Mapping[str, Any] = (
        AgentRun.objects.filter(run_id=run_id).values("status", "resume_requested_at").first() or {}
    )
    status = row.get("status")
    if not (
        status == RunStatus.RUNNING or (status == RunStatus.SUSPENDED and row.get("resume_requested_at"))
    ):
        raise InvalidTransition(
            f"run {run_id} is {status}; re-dispatch needs it running, or suspended with a resume request"
        )
    if not run_enqueue(run_id=run_id):
        raise BrokerUnreachable(
            "the wake-up was not sent (the broker is unreachable); the sweep will resend it"
        )


def _resume(*, run_id: UUID, actor: str, note: str = "") -> Any:
    run = run_resume(run_id=run_id, actor=actor, note=note)
    # run_resume wakes a worker at once, before this transaction (with the audit entry) commits;
    # wake it again after the commit so it finds the request.
    transaction.on_commit(lambda: run_enqueue(run_id=run_id))
    return run


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    apply: Callable[..., Any]
    eligible: Q  # the runs it would change
    needs: str  # the rule, in words, for runs it skips
    effect: str  # what happens to each run, in words (the confirmation says it)


# A run waiting for an approval continues when the approval is decided (the support inbox), so a
# bulk resume leaves it out: resuming it would only be refused again for the missing approval.
WAITING_FOR_APPROVAL = Q(suspend_reason__startswith="approval_")
# Nor the runs a resume would only be refused for (else the dry run counts them as changing, then the
# action skips them): their subject was erased, a resume already waits for a worker, or a LangGraph
# thread (its graph resumes when its question is answered).
NOT_RESUMABLE = (
    WAITING_FOR_APPROVAL
    | Q(suspend_reason=SUBJECT_ERASED)
    | Q(resume_requested_at__isnull=False)
    | Q(workflow_name=LANGGRAPH)
    | Q(imported=True)  # a history copy never runs here
)

ACTIONS = {
    "resume": Action(
        "resume",
        "Resume",
        _resume,
        Q(status=RunStatus.SUSPENDED) & ~NOT_RESUMABLE,
        "suspended, not waiting for an approval or a LangGraph answer, no resume already asked, subject "
        "not erased, not an imported history copy",
        "each run is asked to continue; a worker verifies it first and it stays suspended, with the "
        "reason, if a check fails",
    ),
    "cancel": Action(
        "cancel",
        "Cancel",
        run_cancel,
        Q(status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED], imported=False),
        "running or suspended (not an imported history copy)",
        "each run stops for good (a worker mid-step can no longer commit); it cannot be resumed, only forked",
    ),
    "redispatch": Action(
        "redispatch",
        "Re-dispatch",
        _redispatch,
        (Q(status=RunStatus.RUNNING) | Q(status=RunStatus.SUSPENDED, resume_requested_at__isnull=False))
        & Q(imported=False),
        "running, or suspended with a resume request (not an imported history copy)",
        "each run gets a new wake-up message; PostgreSQL still decides whether it runs",
    ),
}

# What each action has really done when the page comes back: a resume is only asked for (a worker
# verifies the run first, and may refuse it), a cancel is done, a re-dispatch is a wake-up sent.
DONE = {
    "resume": "Resume asked: a worker verifies the run before it continues; the status above shows what it finds.",
    "cancel": "Cancelled: the run stops for good.",
    "redispatch": "Wake-up sent: a worker picks the run up if PostgreSQL says it may run.",
}

# Actions that cannot be undone go through a confirmation page and need a note.
CONFIRMED = frozenset({"cancel"})


class NoteForm(forms.Form):
    note = NoteField(max_length=NOTE_MAX, required=False)


class ConfirmedNoteForm(forms.Form):
    """The confirmation page's form: a note saying why (required) and the confirmation itself."""

    note = NoteField(
        max_length=NOTE_MAX,
        required=True,
        strip=True,
        error_messages={
            "required": "Say why in the note (it is kept in the audit log and the run's history)."
        },
    )
    confirm = forms.CharField(
        required=True, error_messages={"required": "Confirm on this page (nothing was applied)."}
    )

    def clean_confirm(self) -> str:
        value = str(self.cleaned_data.get("confirm", ""))
        if value != "yes":
            raise forms.ValidationError("Confirm on this page (nothing was applied).")
        return value


class RewindForm(ConfirmedNoteForm):
    at_seq = forms.IntegerField(min_value=1)
    # One per rendered form (request_token()): the same form sent twice makes one run, not two.
    request_token = forms.CharField(max_length=64, required=False)


class ForkForm(NoteForm):
    at_seq = forms.IntegerField(min_value=1)
    start = forms.BooleanField(required=False)
    request_token = forms.CharField(max_length=64, required=False)


def _apply(
    request: HtmxHttpRequest, run: Any, action: str, note: str, call: Callable[[], Any], **details: Any
) -> Any:
    """The service call and its audit entry, both or neither (none for a request sent again, whose
    result says created False: it changed nothing)."""
    with transaction.atomic():
        result = call()
        if getattr(result, "created", True) is False:
            return result
        audit_record(
            request=request,
            action=action,
            tenant=run.tenant,
            target_type="run",
            target_id=run.run_id,
            note=note,
            details=details,
        )
    return result


def _refused(request: HtmxHttpRequest, run_id: UUID, message: str, status: int) -> HttpResponse:
    messages.error(request, message)
    run = run_for_user(request.user, run_id)  # reloaded: show it as it is now
    return render(request, "console/engineer/run_detail.html", run_page_context(request, run), status=status)


def _confirm_page(
    request: HtmxHttpRequest, run: AgentRun, action: str, form: forms.Form, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {
        "run": run,
        "action": action,
        "form": form,
        "active": run.status in ACTIVE,
        # The token the rewind's form came with (kept when the page is shown again with errors).
        "request_token": str(form.data.get("request_token") or "")[:64] or request_token(),
        **extra,
    }
    return render(request, "console/engineer/confirm.html", context, status=status)


ACTIVE = (RunStatus.RUNNING, RunStatus.SUSPENDED)


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def run_action(request: HtmxHttpRequest, run_id: UUID, action: str) -> HttpResponse:
    """Resume, cancel or re-dispatch one run. Cancel first shows what will happen (GET) and needs
    the confirmation and a note (POST); a missing note is a form error (422) and applies nothing."""
    run = run_for_user(request.user, run_id)
    chosen = ACTIONS[action]
    form: forms.Form
    if action in CONFIRMED:
        if _unconfirmed(request):  # the run page's button: say what will happen first
            initial = {"note": str(request.POST.get("note", ""))[:NOTE_MAX]}
            return _confirm_page(request, run, action, ConfirmedNoteForm(initial=initial))
        form = ConfirmedNoteForm(request.POST)
        if not form.is_valid():
            return _confirm_page(request, run, action, form, status=422)
    else:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        form = NoteForm(request.POST)
        if not form.is_valid():
            return _refused(request, run.run_id, "the note is too long", 422)
    note, actor = form.cleaned_data["note"], actor_of(request)
    if action == "resume" and run.status == RunStatus.SUSPENDED and run.suspend_reason in ACCEPTABLE_REFUSALS:
        # The worker would refuse it again, for the same reason: say so now, and change nothing.
        return _refused(
            request,
            run.run_id,
            f"Resume not asked: the last resume was refused ({run.suspend_reason}) and would be refused "
            "again; accept the changed state first (below), then resume.",
            409,
        )
    try:
        _apply(request, run, action, note, lambda: chosen.apply(run_id=run.run_id, actor=actor, note=note))
    except ApplicationError as exc:
        return _refused(request, run.run_id, f"{chosen.label} refused: {exc.message}", exc.http_status)
    messages.success(request, DONE[action])
    return redirect("console:run_detail", run_id=run.run_id)


def _unconfirmed(request: HtmxHttpRequest) -> bool:
    """A GET, or a POST from the run page's form (no confirmation field): show the confirmation."""
    return request.method == "GET" or "confirm" not in request.POST


def _rewind_confirm(request: HtmxHttpRequest, run: AgentRun) -> HttpResponse | None:
    """The rewind's confirmation page (first, or again with the form's errors); None: go ahead."""
    data = request.POST if request.method == "POST" else request.GET
    try:
        at_seq = max(1, min(int(str(data.get("at_seq"))), run.state_revision))
    except (TypeError, ValueError):
        at_seq = run.state_revision
    if _unconfirmed(request):
        form = RewindForm(initial={"note": str(data.get("note", ""))[:NOTE_MAX], "at_seq": at_seq})
        return _confirm_page(request, run, "rewind", form, at_seq=at_seq)
    form = RewindForm(request.POST)
    if form.is_valid():
        return None
    return _confirm_page(request, run, "rewind", form, status=422, at_seq=at_seq)


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def run_fork_view(request: HtmxHttpRequest, run_id: UUID, rewind: bool = False) -> HttpResponse:
    """Fork a new run from one event, or rewind (a fork that supersedes this run: it shows what
    will happen first, and needs the confirmation and a note)."""
    run = run_for_user(request.user, run_id)
    if rewind:
        page = _rewind_confirm(request, run)
        if page is not None:
            return page
    elif request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    form = ForkForm(request.POST)
    if not form.is_valid():
        return _refused(
            request, run.run_id, "give the event's seq (a whole number from 1) and a short note", 422
        )
    seq, note, actor = form.cleaned_data["at_seq"], form.cleaned_data["note"], actor_of(request)
    token = form.cleaned_data["request_token"] or None
    name = "rewind" if rewind else "fork"
    try:
        if rewind:
            made = _apply(
                request,
                run,
                name,
                note,
                lambda: run_rewind(
                    run_id=run.run_id, to_seq=seq, actor=actor, note=note, idempotency_key=token
                ),
                to_seq=seq,
            )
        else:
            start = form.cleaned_data["start"]
            made = _apply(
                request,
                run,
                name,
                note,
                lambda: run_fork_once(
                    run_id=run.run_id, at_seq=seq, actor=actor, start=start, note=note, idempotency_key=token
                ),
                at_seq=seq,
            )
    except ApplicationError as exc:
        return _refused(request, run.run_id, f"{name.capitalize()} refused: {exc.message}", exc.http_status)
    child = made.run
    if not made.created:
        messages.info(request, f"this form was sent before: run {child.run_id} is the {name} it made")
        return redirect("console:run_detail", run_id=child.run_id)
    verb = "was rewound to event" if rewind else "was forked at event"
    messages.success(request, f"run {run.run_id} {verb} {seq}: this is the new run {child.run_id}")
    return redirect("console:run_detail", run_id=child.run_id)


class AcceptStateForm(forms.Form):
    note = NoteField(max_length=NOTE_MAX, required=True, strip=True)
    state_digest = forms.CharField(max_length=200, required=True)


@role_required(ENGINEER)
@require_POST
def run_accept_state_view(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """Accept the changed state (or history) a resume was refused for: a note is required, and only
    the state shown on the page (its digest) is accepted."""
    run = run_for_user(request.user, run_id)
    form = AcceptStateForm(request.POST)
    if not form.is_valid():
        return _refused(request, run.run_id, "Accept refused: say in the note why this state is right", 422)
    note, digest, actor = form.cleaned_data["note"], form.cleaned_data["state_digest"], actor_of(request)
    try:
        change = _apply(
            request,
            run,
            "accept_state",
            note,
            lambda: run_state_accept(run_id=run.run_id, actor=actor, note=note, expected_digest=digest),
            accepted_digest=digest,
            refused_code=run.suspend_reason,
        )
    except ApplicationError as exc:
        return _refused(request, run.run_id, f"Accept refused: {exc.message}", exc.http_status)
    messages.success(
        request,
        f"run {run.run_id}: the state {change.current_digest} was accepted (it was "
        f"{change.committed_digest}); resume it to continue",
    )
    return redirect("console:run_detail", run_id=run.run_id)


# --- bulk -----------------------------------------------------------------------------------------


def _bulk_setup(request: HtmxHttpRequest, data: Any) -> tuple[Any, Action | None, Any]:
    tenants = list(user_tenants(request.user))
    form = RunFilterForm(data, tenants=tenants)
    action = ACTIONS.get(str(data.get("action", "")))
    return form, action, tenants


def _token(request: HtmxHttpRequest, action: str, query: str) -> str:
    return signing.dumps({"a": action, "f": query, "u": request.user.pk}, salt=TOKEN_SALT)


def _token_ok(request: HtmxHttpRequest, token: str, action: str, query: str) -> bool:
    try:
        value = signing.loads(token, salt=TOKEN_SALT, max_age=TOKEN_AGE)
    except signing.BadSignature:
        return False
    return value == {"a": action, "f": query, "u": request.user.pk}


class BulkNoteForm(forms.Form):
    note = NoteField(
        max_length=NOTE_MAX,
        required=True,
        strip=True,
        error_messages={"required": "Say why in the note (it is kept in the audit log, one entry per run)."},
    )


def _dry_run(request: HtmxHttpRequest, runs: Any, action: Action, query: str) -> dict[str, Any]:
    """How many runs match, how many would change, the first of them, and the confirmation token."""
    matched = run_count_capped(runs=runs, cap=BULK_CAP)
    eligible = runs.filter(action.eligible)
    would = run_count_capped(runs=eligible, cap=BULK_CAP)
    return {
        "matched": matched,
        "over": matched > BULK_CAP,
        "would": would,
        "skipped": min(matched, BULK_CAP) - would,
        "preview": list(eligible.only(*LIST_FIELDS).order_by("-updated_at", "-run_id")[:PREVIEW]),
        "token": _token(request, action.name, query),
        "preview_size": PREVIEW,
    }


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def bulk(request: HtmxHttpRequest) -> HttpResponse:
    """GET: the dry run (how many match, which would change, what will happen). POST: the action,
    confirmed on the dry-run page of this very filter and with a note (else 422, nothing applied)."""
    data = request.POST if request.method == "POST" else request.GET
    form, action, tenants = _bulk_setup(request, data)
    if action is None or not form.is_valid():
        problem = "choose resume, cancel or re-dispatch" if action is None else "the filter is not valid"
        return render(request, "console/engineer/bulk.html", {"form": form, "problem": problem}, status=422)
    query = filter_query(data)
    runs = run_filtered(tenant_ids=[t.tenant_id for t in tenants], filters=form.cleaned_data)
    context: dict[str, Any] = {
        "form": form,
        "action": action,
        "filter_query": query,
        "cap": BULK_CAP,
        "filter_items": [(k, v) for k in FILTER_FIELDS if (v := data.get(k))],
    }
    if request.method == "GET":
        context.update(_dry_run(request, runs, action, query), note_form=BulkNoteForm())
        return render(request, "console/engineer/bulk.html", context)

    if data.get("confirm") != "yes" or not _token_ok(request, str(data.get("token", "")), action.name, query):
        messages.error(request, "Not applied: tick the confirmation on the dry-run page of this very filter.")
        return render(
            request, "console/engineer/bulk.html", {**context, "problem": "not confirmed"}, status=422
        )
    note_form = BulkNoteForm(data)
    if not note_form.is_valid():  # the dry run again, with the note's error under the note
        context.update(_dry_run(request, runs, action, query), note_form=note_form)
        return render(request, "console/engineer/bulk.html", context, status=422)
    targets = list(
        runs.order_by("-updated_at", "-run_id")
        .select_related("tenant")
        .only("run_id", "status", "suspend_reason", "tenant")[: BULK_CAP + 1]
    )
    if len(targets) > BULK_CAP:
        messages.error(
            request, f"More than {BULK_CAP:,} runs match now; nothing was applied. Narrow the filter."
        )
        return render(request, "console/engineer/bulk.html", {**context, "problem": "too many"}, status=422)
    note, actor = note_form.cleaned_data["note"], actor_of(request)
    changed: list[Any] = []
    skipped: list[tuple[Any, str]] = []
    for run in targets:
        if action.name == "resume" and (run.suspend_reason or "").startswith("approval_"):
            skipped.append((run, "it waits for an approval: decide the approval in the support inbox"))
            continue
        try:
            _apply(
                request,
                run,
                action.name,
                note,
                partial(action.apply, run_id=run.run_id, actor=actor, note=note),
                bulk=True,
                filter=query,
            )
        except ApplicationError as exc:
            skipped.append((run, exc.message))
        else:
            changed.append(run)
    messages.success(request, f"{action.label}: {len(changed)} changed, {len(skipped)} skipped.")
    context.update(done=True, changed=changed, skipped=skipped)
    return render(request, "console/engineer/bulk.html", context)
