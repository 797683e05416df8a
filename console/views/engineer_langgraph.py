"""Engineer screens of a LangGraph thread: its checkpoints as a timeline, the state at one and the diff
to its parent, and a fork from one (audited). Reading values needs the `langgraph` extra."""

from __future__ import annotations

from types import ModuleType
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.display import MAX_DIFF_ENTRIES, json_diff
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, run_for_user
from console.views.engineer import request_token
from core.errors import ApplicationError
from runs.kernel.models import AgentRun, RunStatus
from runs.langgraph.store import WORKFLOW as LANGGRAPH

NOTE_MAX = 2000


class CheckpointForkForm(forms.Form):
    checkpoint_id = forms.CharField(max_length=200)
    request_token = forms.CharField(max_length=64, required=False)  # the form sent twice forks once
    note = NoteField(max_length=NOTE_MAX, widget=forms.Textarea(attrs={"rows": 2, "dir": "auto"}))


def _timeline() -> ModuleType:
    try:
        from runs.langgraph import timeline
    except ImportError as exc:  # the extra is not installed where the console runs
        raise Http404("LangGraph is not installed here: pip install -e '.[langgraph]'") from exc
    return timeline


def _thread(request: HtmxHttpRequest, run_id: UUID) -> tuple[AgentRun, str]:
    run = run_for_user(request.user, run_id)
    if run.workflow_name != LANGGRAPH or not (run.idempotency_key or "").startswith("langgraph:"):
        raise Http404("this run is not a LangGraph thread")
    return run, str(run.idempotency_key).removeprefix("langgraph:")


def _page(
    request: HtmxHttpRequest, run_id: UUID, *, fork_form: forms.Form | None = None, status: int = 200
) -> HttpResponse:
    run, thread_id = _thread(request, run_id)
    timeline = _timeline()
    rows = timeline.thread_checkpoint_list(tenant_id=run.tenant_id, thread_id=thread_id)
    chosen = request.GET.get("checkpoint") or (rows[0].checkpoint_id if rows else "")
    context: dict[str, Any] = {"run": run, "thread_id": thread_id, "rows": rows, "chosen": chosen}
    row = next((r for r in rows if r.checkpoint_id == chosen), None)
    if chosen and row is None:
        context["error"] = "no such checkpoint among this thread's latest ones"
        status = status if status != 200 else 404
    elif row is not None:
        state = timeline.thread_checkpoint_state(
            tenant_id=run.tenant_id, thread_id=thread_id, checkpoint_id=chosen
        )
        parent = (
            timeline.thread_checkpoint_state(
                tenant_id=run.tenant_id, thread_id=thread_id, checkpoint_id=row.parent_checkpoint_id
            )
            if row.parent_checkpoint_id
            else None
        )
        entries, cut = json_diff(parent or {}, state or {})
        context.update(row=row, state=state, entries=entries, cut=cut, limit=MAX_DIFF_ENTRIES)
    context["fork_form"] = fork_form or CheckpointForkForm(initial={"checkpoint_id": chosen})
    context["request_token"] = request_token()
    context["active"] = run.status == RunStatus.SUSPENDED
    return render(request, "console/engineer/langgraph.html", context, status=status)


@role_required(ENGINEER)
@require_safe
def run_langgraph(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    return _page(request, run_id)


@role_required(ENGINEER)
@require_POST
def run_langgraph_fork(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """A new latest checkpoint of the thread copied from the chosen one (its parent): the graph runs
    on from there when its process next invokes the thread. The checkpoint and the audit entry are
    written together or not at all."""
    run, thread_id = _thread(request, run_id)
    form = CheckpointForkForm(request.POST)
    if not form.is_valid():
        return _page(request, run_id, fork_form=form, status=422)
    data, actor = form.cleaned_data, actor_of(request)
    timeline = _timeline()
    try:
        with transaction.atomic():
            AgentRun.objects.select_for_update().filter(run_id=run.run_id).first()  # one fork at a time
            forked, created = timeline.thread_checkpoint_fork(
                tenant_id=run.tenant_id,
                thread_id=thread_id,
                checkpoint_id=data["checkpoint_id"],
                actor=actor,
                note=data["note"],
                request_token=data["request_token"],
            )
            if not created:
                messages.info(request, f"this form was sent before: checkpoint {forked} is the fork it made")
                return redirect(f"/runs/{run.run_id}/langgraph/?checkpoint={forked}")
            audit_record(
                request=request,
                action="langgraph_fork",
                tenant=run.tenant,
                target_type="run",
                target_id=run.run_id,
                note=data["note"],
                details={
                    "thread_id": thread_id,
                    "forked_from": data["checkpoint_id"],
                    "checkpoint_id": forked,
                },
            )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return _page(
            request, run_id, fork_form=form, status=exc.http_status if 400 <= exc.http_status < 500 else 409
        )
    messages.success(
        request,
        f"Forked: checkpoint {forked} is the thread's latest; the graph runs on from it when next invoked.",
    )
    return redirect(f"/runs/{run.run_id}/langgraph/?checkpoint={forked}")
