"""Support screens: the inbox of runs that need a person, and approve / reject / reconcile / resume /
cancel. Each action is a POST on an object of the user's tenants (else 404), done by one run service
(which writes the run event with the actor and note) and then recorded in the audit log; an action
the service refuses shows its message with its 4xx status and records nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.display import approval_row, operation_row, refusal_of
from console.forms import NoteField
from console.htmx import HtmxHttpRequest, htmx_target
from console.roles import SUPPORT, role_required, run_for_user, tenant_ids_for_user
from console.selectors import INBOX_LIMIT, operation_last_lookup
from console.selectors import support_inbox as inbox_read
from core.errors import ApplicationError
from core.models import Tenant
from runs.engine.approvals import approval_approve, approval_reject
from runs.engine.operations import RECONCILE_OUTCOMES, operation_reconcile
from runs.engine.registry import ToolLookup, registry
from runs.engine.runs import run_cancel, run_resume
from runs.engine.selectors import (
    approval_get_for_tenants,
    approval_pending_list,
    event_latest_refusal,
    event_recent_list,
    operation_get_for_tenants,
    run_operations_in_doubt,
)
from runs.kernel.models import (
    TERMINAL_RUN_STATUSES,
    AgentRun,
    Approval,
    ApprovalStatus,
    OperationStatus,
    RunStatus,
    ToolOperation,
)
from runs.langgraph.interrupts import (
    ANSWER_MAX_BYTES,
    answer_pending_get,
    interrupt_answer,
    thread_interrupt_get,
)
from runs.langgraph.store import WORKFLOW as LANGGRAPH

NOTE_MAX = 2000  # as the REST API
OUTCOME_LABELS = {
    "applied": "applied: it happened (give the external reference you found)",
    "not_applied": "not applied: it never happened (allow one retry)",
}


class NoteForm(forms.Form):
    note = NoteField(max_length=NOTE_MAX, widget=forms.Textarea(attrs={"rows": 2, "dir": "auto"}))


class ReconcileForm(NoteForm):
    outcome = forms.ChoiceField(
        choices=[(o, OUTCOME_LABELS[o]) for o in RECONCILE_OUTCOMES], widget=forms.RadioSelect
    )
    external_ref = forms.CharField(max_length=200, required=False)
    resume = forms.BooleanField(required=False, initial=True, label="resume the run afterwards")
    field_order = ["outcome", "external_ref", "note", "resume"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("outcome") == "applied" and not data.get("external_ref", "").strip():
            self.add_error("external_ref", "an applied operation needs the external reference you found")
        return data


class LangGraphAnswerForm(forms.Form):
    """A person's answer to a LangGraph interrupt(): text as it is, or a JSON value."""

    checkpoint_id = forms.CharField(max_length=200, widget=forms.HiddenInput)
    interrupt_id = forms.CharField(max_length=200, widget=forms.HiddenInput)
    kind = forms.ChoiceField(
        choices=[("text", "as text"), ("json", "as JSON")], initial="text", widget=forms.RadioSelect
    )
    answer = forms.CharField(
        max_length=ANSWER_MAX_BYTES // 4, strip=False, widget=forms.Textarea(attrs={"rows": 3, "dir": "auto"})
    )
    note = NoteField(
        max_length=NOTE_MAX, required=False, widget=forms.Textarea(attrs={"rows": 2, "dir": "auto"})
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "answer" in data:
            data["value"] = data["answer"]
            if data.get("kind") == "json":
                try:
                    data["value"] = json.loads(data["answer"])
                except ValueError as exc:
                    self.add_error(
                        "answer", f"this is not JSON ({exc}); choose 'as text' to send it as it is"
                    )
                except RecursionError:  # thousands of nested brackets: the parser gives up
                    self.add_error("answer", "this JSON nests too deep to read")
        return data


def _tenants(request: HttpRequest) -> list[UUID]:
    return tenant_ids_for_user(request.user)


def _approval(request: HtmxHttpRequest, approval_id: UUID) -> Approval:
    approval = approval_get_for_tenants(tenant_ids=_tenants(request), approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval")
    return approval


def _operation(request: HtmxHttpRequest, pk: int) -> ToolOperation:
    op = operation_get_for_tenants(tenant_ids=_tenants(request), pk=pk)
    if op is None:
        raise Http404("no such operation")
    return op


def _render(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    """The page, or only its polled part when htmx asks for it (the same view and context)."""
    target = htmx_target(request)
    if target == "run-status":  # the approval, operation and run pages all show the run page's part
        template = "console/support/run.html#run-status"
    elif target == "inbox-rows":
        template = "console/support/inbox.html#inbox-rows"
    return render(request, template, context, status=status)


def _run_context(run: AgentRun) -> dict[str, Any]:
    refused = event_latest_refusal(run=run) if run.status == RunStatus.SUSPENDED else None
    refusal = refusal_of(refused) if refused is not None else None
    return {
        "run": run,
        "refusal": refusal,
        "events": event_recent_list(run=run),
    }


def _act(
    request: HtmxHttpRequest,
    form: forms.Form,
    *,
    perform: Callable[[dict[str, Any]], object],
    page: Callable[[forms.Form, int], HttpResponse],
    action: str,
    tenant: Tenant,
    target_type: str,
    target_id: Any,
    details: dict[str, Any],
    done: str,
    next_url: str,
) -> HttpResponse:
    """Validate, call the service, then audit. Not one transaction: the run services enqueue the
    worker's wake-up themselves (run_resume sends it before any outer commit), so wrapping them
    would wake a worker that cannot yet see the request."""
    if not form.is_valid():
        return page(form, 422)
    try:
        perform(form.cleaned_data)
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return page(form, exc.http_status if 400 <= exc.http_status < 500 else 409)
    audit_record(
        request=request,
        action=action,
        tenant=tenant,
        target_type=target_type,
        target_id=target_id,
        note=form.cleaned_data["note"],
        details=details,
    )
    messages.success(request, done)
    return redirect(next_url)


@role_required(SUPPORT)
@require_safe
def support_inbox(request: HtmxHttpRequest) -> HttpResponse:
    inbox = inbox_read(tenant_ids=_tenants(request), now=timezone.now())
    return _render(request, "console/support/inbox.html", {"inbox": inbox, "limit": INBOX_LIMIT})


# --- approvals --------------------------------------------------------------------------------------


def _approval_page(
    request: HtmxHttpRequest,
    approval_id: UUID,
    *,
    approve_form: forms.Form | None = None,
    reject_form: forms.Form | None = None,
    status: int = 200,
) -> HttpResponse:
    approval = _approval(request, approval_id)
    context = {
        "row": approval_row(approval, timezone.now()),
        "approval": approval,
        "pending": approval.status == ApprovalStatus.PENDING,
        "approve_form": approve_form or NoteForm(),
        "reject_form": reject_form or NoteForm(),
        **_run_context(approval.run),
    }
    return _render(request, "console/support/approval.html", context, status)


@role_required(SUPPORT)
@require_safe
def support_approval(request: HtmxHttpRequest, approval_id: UUID) -> HttpResponse:
    return _approval_page(request, approval_id)


def _decide(request: HtmxHttpRequest, approval_id: UUID, decision: str) -> HttpResponse:
    approval = _approval(request, approval_id)
    service = approval_approve if decision == "approve" else approval_reject
    form_key = f"{decision}_form"
    return _act(
        request,
        NoteForm(request.POST),
        perform=lambda d: service(approval_id=approval.approval_id, actor=actor_of(request), note=d["note"]),
        page=lambda form, status: _approval_page(request, approval_id, status=status, **{form_key: form}),
        action=decision,
        tenant=approval.tenant,
        target_type="approval",
        target_id=approval.approval_id,
        details={"run_id": str(approval.run_id), "request_digest": approval.request_digest},
        done=(
            "Approved: the run continues once a worker has verified the approval."
            if decision == "approve"
            else "Rejected: the run ends without a refund when a worker next picks it up."
        ),
        next_url=reverse("console:support_approval", args=[approval.approval_id]),
    )


@role_required(SUPPORT)
@require_POST
def support_approval_approve(request: HtmxHttpRequest, approval_id: UUID) -> HttpResponse:
    return _decide(request, approval_id, "approve")


@role_required(SUPPORT)
@require_POST
def support_approval_reject(request: HtmxHttpRequest, approval_id: UUID) -> HttpResponse:
    return _decide(request, approval_id, "reject")


# --- operations in doubt --------------------------------------------------------------------------


def _operation_page(
    request: HtmxHttpRequest,
    pk: int,
    *,
    form: forms.Form | None = None,
    lookup_error: str = "",
    status: int = 200,
    fragment: bool = False,
) -> HttpResponse:
    """The reconcile page; `fragment`: only its lookup-and-reconcile card (the htmx answer to
    "Look up again", swapped in place; always 200 so htmx swaps it, the reason shown inside)."""
    op = _operation(request, pk)
    contract = registry.tool(op.tool_name)
    row = operation_row(op, operation_last_lookup(op=op))
    if form is None:
        said = row["lookup"] or {}
        initial = (
            {"outcome": "applied", "external_ref": said.get("external_ref") or ""}
            if said.get("authoritative") and said.get("applied")
            else {"outcome": "not_applied"}
            if said.get("authoritative")
            else {}
        )
        form = ReconcileForm(initial=initial)
    context = {
        "row": row,
        "op": op,
        "form": form,
        "lookup_error": lookup_error,
        "open": op.status in (OperationStatus.STARTED, OperationStatus.UNKNOWN),
        "history": [
            {**h, "at": str(h.get("at", ""))[:19].replace("T", " ")}
            for h in op.history or []
            if isinstance(h, dict)
        ],
        "workflow_lookup": _workflow_lookup(op),
        "can_look_up": contract is not None and contract.lookup is not None,
        "just_looked_up": fragment and not lookup_error,
        **_run_context(op.run),
    }
    if fragment:
        return render(request, "console/support/operation.html#lookup-card", context)
    return _render(request, "console/support/operation.html", context, status)


def _workflow_lookup(op: ToolOperation) -> dict[str, Any] | None:
    """The newest move of the operation that the workflow's or resume's own lookup decided (its note
    says what the lookup answered), for an operation no person has looked up from the console."""
    for move in reversed(op.history or []):
        if isinstance(move, dict) and "lookup" in str(move.get("note", "")):
            return {**move, "at": str(move.get("at", ""))[:19].replace("T", " ")}
    return None


@role_required(SUPPORT)
@require_safe
def support_operation(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _operation_page(request, pk)


@role_required(SUPPORT)
@require_POST
def support_operation_lookup(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Ask the external system again, by idempotency key, through the tool's own lookup (the one the
    workflow and resume verification use), and record what it said. It settles nothing by itself."""
    op = _operation(request, pk)
    inline = bool(request.htmx)
    contract = registry.tool(op.tool_name)
    if contract is None or contract.lookup is None:
        why = f"{op.tool_name} has no lookup here; check the external system by hand and reconcile"
        return _operation_page(request, pk, lookup_error=why, status=409, fragment=inline)
    try:
        found = contract.lookup(op.operation_id) or ToolLookup(authoritative=False, applied=None)
    except ApplicationError as exc:
        return _operation_page(request, pk, lookup_error=exc.message, status=exc.http_status, fragment=inline)
    # Not the answer's body: the audit log is append-only and an external system's answer can hold
    # the customer's data (found from outside: a refund lookup echoed its idempotency key, which
    # embedded the subject's id, and the subject's erasure then failed for ever).
    said = {
        "tool": op.tool_name,
        "authoritative": found.authoritative,
        "applied": found.applied,
        "external_ref": found.external_ref,
    }
    audit_record(
        request=request,
        action="lookup",
        tenant=op.tenant,
        # By its row's number: the operation id is the external system's key and can embed the
        # subject's id, and an audit entry's target can never be erased (found from outside: the
        # subject's erasure then failed for ever on console_audit_log.target_id).
        target_type="operation",
        target_id=op.pk,
        details={**said, "operation_pk": op.pk, "run_id": str(op.run_id)},
    )
    if inline:  # the answer in place of the card (the reconcile form prefilled from it)
        return _operation_page(request, pk, fragment=True)
    if found.authoritative and found.applied:
        messages.info(
            request,
            f"The lookup says it was applied (reference {found.external_ref}). "
            "Mark it applied with that reference.",
        )
    elif found.authoritative:
        messages.info(request, "The lookup says it was not applied. Confirm not applied to allow one retry.")
    else:
        messages.warning(
            request,
            "The lookup is not authoritative or unavailable: it proves nothing. "
            "Check the payment by hand before you reconcile.",
        )
    return redirect("console:support_operation", pk=op.pk)


@role_required(SUPPORT)
@require_POST
def support_operation_reconcile(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    op = _operation(request, pk)
    form = ReconcileForm(request.POST)
    if not form.is_valid():
        return _operation_page(request, pk, form=form, status=422)
    data = form.cleaned_data
    ref = data["external_ref"].strip() or None
    return _act(
        request,
        form,
        perform=lambda d: operation_reconcile(
            tenant_id=op.tenant_id,
            operation_id=op.operation_id,
            actor=actor_of(request),
            note=d["note"],
            outcome=d["outcome"],
            external_ref=ref,
            resume=d["resume"],
        ),
        page=lambda f, status: _operation_page(request, pk, form=f, status=status),
        action="reconcile",
        tenant=op.tenant,
        target_type="operation",
        target_id=op.pk,  # by number, as the lookup's
        details={
            "run_id": str(op.run_id),
            "operation_pk": op.pk,
            "outcome": data["outcome"],
            "external_ref": ref,
            "resume": data["resume"],
        },
        done="Reconciled."
        + (
            f" The run is {op.run.status}: the settlement is recorded on it."
            if op.run.status in TERMINAL_RUN_STATUSES
            else " The run continues once a worker has verified it."
            if data["resume"]
            else " The run stays suspended until someone resumes it."
        ),
        next_url=reverse("console:support_operation", args=[op.pk]),
    )


# --- runs: resume and cancel -----------------------------------------------------------------------


def _run_page(
    request: HtmxHttpRequest,
    run_id: UUID,
    *,
    resume_form: forms.Form | None = None,
    cancel_form: forms.Form | None = None,
    answer_form: forms.Form | None = None,
    status: int = 200,
) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    approvals = approval_pending_list(tenant_ids=[run.tenant_id], run_id=run.run_id)
    question = answered = None
    if run.workflow_name == LANGGRAPH:
        thread = thread_interrupt_get(tenant_id=run.tenant_id, run_id=run.run_id)
        question = thread if thread is not None and thread.open else None
        answered = answer_pending_get(tenant_id=run.tenant_id, run_id=run.run_id)
    if answer_form is None and question is not None:
        answer_form = LangGraphAnswerForm(
            initial={"checkpoint_id": question.checkpoint_id, "interrupt_id": question.asked[0].interrupt_id}
        )
    context = {
        "question": question,
        "answered": answered,
        "answer_form": answer_form,
        "in_doubt": run_operations_in_doubt(run=run),
        "pending_approvals": approvals,
        "resume_form": resume_form or NoteForm(),
        "cancel_form": cancel_form or NoteForm(),
        "active": run.status in (RunStatus.RUNNING, RunStatus.SUSPENDED),
        **_run_context(run),
    }
    return _render(request, "console/support/run.html", context, status)


@role_required(SUPPORT)
@require_safe
def support_run(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    return _run_page(request, run_id)


def _run_action(request: HtmxHttpRequest, run_id: UUID, action: str) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    service = run_resume if action == "resume" else run_cancel
    return _act(
        request,
        NoteForm(request.POST),
        perform=lambda d: service(run_id=run.run_id, actor=actor_of(request), note=d["note"]),
        page=lambda form, status: _run_page(request, run_id, status=status, **{f"{action}_form": form}),
        action=action,
        tenant=run.tenant,
        target_type="run",
        target_id=run.run_id,
        details={"status_before": run.status, "suspend_reason": run.suspend_reason},
        done=(
            "Resume requested: a worker verifies the run before it continues."
            if action == "resume"
            else "Cancelled: the run stops for good."
        ),
        next_url=reverse("console:support_run", args=[run.run_id]),
    )


@role_required(SUPPORT)
@require_POST
def support_run_resume(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    return _run_action(request, run_id, "resume")


@role_required(SUPPORT)
@require_POST
def support_run_cancel(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    return _run_action(request, run_id, "cancel")


@role_required(SUPPORT)
@require_POST
def support_langgraph_answer(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """Answer a LangGraph thread's interrupt(): recorded once per checkpoint and interrupt (a second
    click gives the first answer back and records nothing), audited, then resumed by a worker when the
    graph is registered with Keeper."""
    run = run_for_user(request.user, run_id)
    form = LangGraphAnswerForm(request.POST)
    if not form.is_valid():
        return _run_page(request, run_id, answer_form=form, status=422)
    data = form.cleaned_data
    try:
        answer = interrupt_answer(
            tenant_id=run.tenant_id,
            run_id=run.run_id,
            answer=data["value"],
            actor=actor_of(request),
            checkpoint_id=data["checkpoint_id"],
            interrupt_id=data["interrupt_id"],
            note=data["note"],
        )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return _run_page(
            request, run_id, answer_form=form, status=exc.http_status if 400 <= exc.http_status < 500 else 409
        )
    if not answer.created:
        messages.info(
            request, f"This question was already answered by {answer.actor}; nothing more was recorded."
        )
        return redirect("console:support_run", run_id=run.run_id)
    audit_record(
        request=request,
        action="langgraph_answer",
        tenant=run.tenant,
        target_type="run",
        target_id=run.run_id,
        note=data["note"],
        details={
            "checkpoint_id": answer.checkpoint_id,
            "interrupt_id": answer.interrupt_id,
            "answer_seq": answer.seq,
            "graph": answer.graph,
        },
    )
    messages.success(
        request,
        "Answered: a worker resumes the graph with your answer."
        if answer.graph
        else "Answered: the graph takes your answer when its process next resumes the thread.",
    )
    return redirect("console:support_run", run_id=run.run_id)
