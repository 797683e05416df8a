"""Engineer actions on the run page that talk to the workflow itself, as Temporal's UI does: send one
of the signals its workflow declares (once per rendered form; audited) and run one of its queries (a
read of its state; nothing changes, nothing is audited)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest, htmx_target
from console.roles import ENGINEER, role_required, run_for_user
from console.views.engineer import run_page_context
from core.errors import ApplicationError
from runs.engine.signals import MAX_SIGNAL_PAYLOAD_CHARS, query_read, signal_send

NOTE_MAX = 2000


class SignalForm(forms.Form):
    name = forms.CharField(max_length=200)
    payload = forms.CharField(required=False, max_length=MAX_SIGNAL_PAYLOAD_CHARS, strip=False)
    note = NoteField(max_length=NOTE_MAX, required=False)
    # One per rendered form: sent twice (a double click, a reload), the signal is delivered once.
    request_token = forms.CharField(max_length=64)

    def clean_payload(self) -> Any:
        raw = self.cleaned_data.get("payload", "")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"the payload is not JSON ({exc})") from None
        except RecursionError:
            raise forms.ValidationError("the payload nests too deep to read") from None


@role_required(ENGINEER)
@require_POST
def run_signal(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """Send a declared signal with a JSON payload; the page says whether the run was waiting for it."""
    run = run_for_user(request.user, run_id)
    form = SignalForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(
            f"{name}: {', '.join(str(e) for e in errors)}" for name, errors in form.errors.items()
        )
        messages.error(request, f"Signal not sent: {problems}")
        return redirect("console:run_detail", run_id=run.run_id)
    data = form.cleaned_data
    try:
        sent = signal_send(
            run_id=run.run_id,
            name=data["name"],
            payload=data["payload"],
            idempotency_key=f"console:{data['request_token']}",
            actor=actor_of(request),
        )
    except ApplicationError as exc:
        messages.error(request, f"Signal {data['name']} refused: {exc.message}")
        return redirect("console:run_detail", run_id=run.run_id)
    if not sent.created:
        messages.info(
            request,
            f"This form was sent before: the signal is event {sent.event.seq}; nothing more was sent.",
        )
        return redirect("console:run_detail", run_id=run.run_id)
    audit_record(
        request=request,
        action="signal",
        tenant=run.tenant,
        target_type="run",
        target_id=run.run_id,
        note=data["note"],
        details={"signal": data["name"], "seq": sent.event.seq},
    )
    messages.success(
        request,
        f"Signal {data['name']} sent (event {sent.event.seq}): "
        + (
            "the run was waiting for it and a worker takes it up now."
            if sent.woke
            else "the run was not waiting for it; it reads it when it next waits for this signal."
        ),
    )
    return redirect("console:run_detail", run_id=run.run_id)


@role_required(ENGINEER)
@require_safe
def run_query(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """The answer of a declared query on the run's state (in place with htmx, else on the run page)."""
    run = run_for_user(request.user, run_id)
    name = str(request.GET.get("name", ""))[:200]
    context: dict[str, Any] = {"run": run, "query_name": name}
    status = 200
    try:
        context["query_answer"] = query_read(run_id=run.run_id, name=name)
    except ApplicationError as exc:
        context["query_error"], status = exc.message, exc.http_status
    if htmx_target(request) == "query-answer":
        # htmx swaps only 2xx answers: the reason is shown inside.
        return render(request, "console/engineer/run_detail.html#query-answer", context)
    return render(
        request,
        "console/engineer/run_detail.html",
        {**run_page_context(request, run), **context},
        status=status,
    )
