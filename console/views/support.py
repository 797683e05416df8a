"""Support screens: the inbox of runs that need a person, an approval as its workflow declared it
(beside the conversation or the steps that led to it), a run's page (resume, cancel, a LangGraph
question answered as Agent Inbox offers). Each action is a POST on an object of the user's tenants
(else 404), done by one run service (which writes the run event with the actor and note) and then
recorded in the audit log; an action the service refuses shows its message with its 4xx status and
records nothing. Operations in doubt: console/views/support_operations.py."""

from __future__ import annotations

from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from console.approvals import approval_reading
from console.audit import actor_of, audit_record
from console.conversation import conversation_of
from console.display import approval_row
from console.htmx import HtmxHttpRequest
from console.langgraph_inbox import InboxAnswerForm, LangGraphAnswerForm, question_context, thread_reply
from console.roles import SUPPORT, role_required, run_for_user
from console.selectors import INBOX_LIMIT
from console.selectors import support_inbox as inbox_read
from console.steps import run_steps
from console.views.support_common import NoteForm, run_context, support_act, support_render, tenants_of
from core.errors import ApplicationError
from runs.engine.approvals import approval_approve, approval_reject
from runs.engine.reconciliation import run_operations_reconciled_by_person
from runs.engine.runs import run_cancel, run_resume
from runs.engine.selectors import (
    approval_get_for_tenants,
    approval_pending_list,
    run_input,
    run_operations_in_doubt,
)
from runs.kernel.models import SUBJECT_ERASED, AgentRun, Approval, ApprovalStatus, RunStatus
from runs.langgraph.inbox import inbox_request
from runs.langgraph.interrupts import interrupt_answer, thread_interrupt_get
from runs.langgraph.store import WORKFLOW as LANGGRAPH

HISTORY_STEPS = 20  # the newest steps shown as what led to an approval


def _approval(request: HtmxHttpRequest, approval_id: UUID) -> Approval:
    approval = approval_get_for_tenants(tenant_ids=tenants_of(request), approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval")
    return approval


@role_required(SUPPORT)
@require_safe
def support_inbox(request: HtmxHttpRequest) -> HttpResponse:
    inbox = inbox_read(tenant_ids=tenants_of(request), now=timezone.now())
    return support_render(request, "console/support/inbox.html", {"inbox": inbox, "limit": INBOX_LIMIT})


# --- approvals --------------------------------------------------------------------------------------


def _approval_page(
    request: HtmxHttpRequest, approval_id: UUID, *, decide_form: forms.Form | None = None, status: int = 200
) -> HttpResponse:
    approval = _approval(request, approval_id)
    run = approval.run
    conversation = conversation_of(run)
    reading = approval_reading(approval)
    pending = approval.status == ApprovalStatus.PENDING
    context = {
        "closed_by_erasure": run.suspend_reason == SUBJECT_ERASED and approval.decided_by == "keeper",
        "row": approval_row(approval, timezone.now()),
        "reading": reading,
        # The customer once: a workflow that declares its customer among the request's fields says it.
        "customer": "" if any(value == run.subject for _, value in reading.facts) else run.subject,
        "approval": approval,
        "pending": pending,
        "decide_form": decide_form or NoteForm(),
        "conversation": conversation,
        "proposals": [reading] if pending else [],
        # What led to the request, when the run is not a conversation: its input and its steps.
        "history": None if conversation else run_steps(run=run, limit=HISTORY_STEPS).rows,
        "run_input": None if conversation else run_input(run=run),
        **run_context(run),
    }
    return support_render(request, "console/support/approval.html", context, status)


@role_required(SUPPORT)
@require_safe
def support_approval(request: HtmxHttpRequest, approval_id: UUID) -> HttpResponse:
    return _approval_page(request, approval_id)


def _decide(request: HtmxHttpRequest, approval_id: UUID, decision: str) -> HttpResponse:
    approval = _approval(request, approval_id)
    service = approval_approve if decision == "approve" else approval_reject
    return support_act(
        request,
        NoteForm(request.POST),
        perform=lambda d: service(approval_id=approval.approval_id, actor=actor_of(request), note=d["note"]),
        page=lambda form, status: _approval_page(request, approval_id, status=status, decide_form=form),
        action=decision,
        tenant=approval.tenant,
        target_type="approval",
        target_id=approval.approval_id,
        details={"run_id": str(approval.run_id), "request_digest": approval.request_digest},
        done=(
            "Approved: the run continues once a worker has verified the approval."
            if decision == "approve"
            else "Rejected: the run goes on without what it asked for once a worker picks it up."
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


# --- runs: resume, cancel, a LangGraph question -----------------------------------------------------


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
    pending = approval_pending_list(tenant_ids=[run.tenant_id], run_id=run.run_id)
    readings = [approval_reading(a) for a in pending]
    langgraph = run.workflow_name == LANGGRAPH
    context = {
        **(question_context(run, answer_form) if langgraph else {}),
        "reply": thread_reply(run) if langgraph else None,
        "conversation": conversation_of(run),
        "proposals": readings,
        "in_doubt": run_operations_in_doubt(run=run),
        # A person's reconciliation a waiting run went on with: correctable from its operation's page.
        "reconciled": run_operations_reconciled_by_person(run=run)
        if run.status == RunStatus.SUSPENDED
        else [],
        "pending_approvals": pending,
        "waiting_approvals": list(zip(pending, readings, strict=True)),
        "resume_form": resume_form or NoteForm(),
        "cancel_form": cancel_form or NoteForm(),
        "active": run.status in (RunStatus.RUNNING, RunStatus.SUSPENDED),
        **run_context(run),
    }
    return support_render(request, "console/support/run.html", context, status)


@role_required(SUPPORT)
@require_safe
def support_run(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    return _run_page(request, run_id)


def _run_action(request: HtmxHttpRequest, run_id: UUID, action: str) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    service = run_resume if action == "resume" else run_cancel
    return support_act(
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
            "Resume asked: a worker verifies the run before it continues; the page shows what it found."
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


def _answer_form(request: HtmxHttpRequest, run: AgentRun) -> forms.Form:
    """The Agent Inbox choice when the question is one of Agent Inbox's, else the text/JSON answer."""
    if "choice" in request.POST:
        thread = thread_interrupt_get(tenant_id=run.tenant_id, run_id=run.run_id)
        asked = thread.asked if thread is not None and thread.open else []
        interrupt_id = str(request.POST.get("interrupt_id", ""))
        value = next((a.value for a in asked if a.interrupt_id == interrupt_id), None)
        inbox = inbox_request(value) if value is not None else None
        if inbox is not None:
            return InboxAnswerForm(request.POST, request=inbox)
    return LangGraphAnswerForm(request.POST)


@role_required(SUPPORT)
@require_POST
def support_langgraph_answer(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """Answer a LangGraph thread's interrupt(): recorded once per checkpoint and interrupt (a second
    click gives the first answer back and records nothing), audited, then resumed by a worker when the
    graph is registered with Keeper."""
    run = run_for_user(request.user, run_id)
    form = _answer_form(request, run)
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
            **({"choice": data["choice"]} if "choice" in data else {}),
        },
    )
    messages.success(
        request,
        "Answered: a worker resumes the graph with your answer; this page shows what it does."
        if answer.graph
        else "Answered: the graph takes your answer when its process next resumes the thread.",
    )
    return redirect("console:support_run", run_id=run.run_id)
