"""A LangGraph question on the support run page, as Agent Inbox shows it: the proposed action and its
arguments, and the choices the graph allows (accept, edit, respond, ignore), each sending the answer
LangGraph expects; a question in another shape is answered as text or JSON. After the answer, what the
graph did with it: its newest state and reply."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import forms

from console.forms import NoteField
from runs.kernel.models import AgentRun
from runs.langgraph.inbox import CHOICES, InboxRequest, inbox_answer, inbox_request
from runs.langgraph.interrupts import ANSWER_MAX_BYTES, answer_pending_get, thread_interrupt_get
from runs.langgraph.store import ANSWERED_REASON, INTERRUPT_REASON, THREAD_REASON

NOTE_MAX = 2000
ARG_PREFIX = "arg:"  # an edited argument's field name: arg:<name>
# What a LangGraph thread's run is, in words (it stays "suspended" between the graph's turns).
THREAD_STATES = {
    THREAD_REASON: "idle: the graph finished its turn",
    INTERRUPT_REASON: "waiting for a person's answer",
    ANSWERED_REASON: "answered: the graph is going on",
}


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


class InboxAnswerForm(forms.Form):
    """A choice of Agent Inbox (accept, edit, respond, ignore) for the question `request`; an edit's
    arguments come as arg:<name> fields, read back as the type the graph proposed."""

    checkpoint_id = forms.CharField(max_length=200)
    interrupt_id = forms.CharField(max_length=200)
    choice = forms.ChoiceField(choices=[(c, c) for c in CHOICES])
    response = forms.CharField(max_length=ANSWER_MAX_BYTES // 4, required=False, strip=False)
    note = NoteField(max_length=NOTE_MAX, required=False)

    def __init__(self, *args: Any, request: InboxRequest, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request = request

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        choice = data.get("choice")
        if choice is None:
            return data
        edited: dict[str, Any] = {}
        if choice == "edit":
            for name, proposed in self.request.args.items():
                raw = str(self.data.get(f"{ARG_PREFIX}{name}", ""))
                try:
                    edited[name] = _typed(raw, proposed)
                except ValueError as exc:
                    raise forms.ValidationError(f"{name}: {exc}") from None
        try:
            data["value"] = inbox_answer(self.request, choice, args=edited, text=data.get("response", ""))
        except Exception as exc:  # InvalidInput: a choice the graph does not allow, or no words
            raise forms.ValidationError(str(getattr(exc, "message", exc))) from None
        return data


def _typed(raw: str, proposed: Any) -> Any:
    """An edited argument as the type the graph proposed it in (ValueError: it is not one)."""
    if isinstance(proposed, bool):
        return raw.strip().lower() in ("true", "on", "yes", "1")
    if isinstance(proposed, int):
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError("a whole number is expected") from None
    if isinstance(proposed, float):
        try:
            return float(raw.strip())
        except ValueError:
            raise ValueError("a number is expected") from None
    if isinstance(proposed, str) or proposed is None:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError("JSON is expected") from None


@dataclass(frozen=True)
class InboxField:
    name: str
    value: str  # as the input shows it
    kind: str  # number, text, checkbox, json


def inbox_fields(request: InboxRequest) -> list[InboxField]:
    fields = []
    for name, value in request.args.items():
        if isinstance(value, bool):
            fields.append(InboxField(name, "on" if value else "", "checkbox"))
        elif isinstance(value, int | float):
            fields.append(InboxField(name, json.dumps(value), "number"))
        elif isinstance(value, str) or value is None:
            fields.append(InboxField(name, value or "", "text"))
        else:
            fields.append(InboxField(name, json.dumps(value, ensure_ascii=False), "json"))
    return fields


def question_context(run: AgentRun, answer_form: forms.Form | None) -> dict[str, Any]:
    """The LangGraph part of the support run page (empty for other runs)."""
    thread = thread_interrupt_get(tenant_id=run.tenant_id, run_id=run.run_id)
    question = thread if thread is not None and thread.open else None
    inbox = inbox_request(question.asked[0].value) if question is not None else None
    if answer_form is None and question is not None and inbox is None:
        answer_form = LangGraphAnswerForm(
            initial={"checkpoint_id": question.checkpoint_id, "interrupt_id": question.asked[0].interrupt_id}
        )
    answered = answer_pending_get(tenant_id=run.tenant_id, run_id=run.run_id)
    return {
        "question": question,
        "inbox": inbox,
        "inbox_fields": inbox_fields(inbox) if inbox is not None else [],
        "answered": answered,
        "answered_words": answer_in_words(answered.value) if answered is not None else "",
        "answer_form": answer_form,
        "thread_state": THREAD_STATES.get(run.suspend_reason or "", "") if run.status == "suspended" else "",
    }


def answer_in_words(value: Any) -> str:
    """An answer as the page says it: an Agent Inbox choice in words, anything else "answered"."""
    response = value[0] if isinstance(value, list) and len(value) == 1 else value
    if not isinstance(response, dict) or response.get("type") not in CHOICES:
        return "answered"
    kind, args = response["type"], response.get("args")
    if kind == "edit" and isinstance(args, dict) and isinstance(args.get("args"), dict):
        changed = ", ".join(f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in args["args"].items())
        return f"edited it ({changed}) and accepted"
    if kind == "response":
        return f"responded: “{str(args)[:300]}”"
    return {"accept": "accepted it", "ignore": "ignored it"}.get(kind, "answered")


def thread_reply(run: AgentRun) -> dict[str, Any] | None:
    """What the graph did after the last answer: its newest checkpoint's time and values, and its
    reply when the state has one (None while it waits, or without the langgraph extra)."""
    if run.status != "suspended" or run.suspend_reason != THREAD_REASON or not run.idempotency_key:
        return None
    try:
        from runs.langgraph.timeline import thread_latest_values
    except ImportError:
        return None
    found = thread_latest_values(
        tenant_id=run.tenant_id, thread_id=run.idempotency_key.removeprefix("langgraph:")
    )
    if found is None:
        return None
    checkpoint, values = found
    reply = values.get("reply")
    return {
        "at": _checkpoint_time(checkpoint.ts),
        "reply": reply if isinstance(reply, str) else "",
        "values": values,
    }


def _checkpoint_time(ts: Any) -> datetime | None:
    """A checkpoint's ts (LangGraph writes ISO text, UTC) as a time the console shows in its one format."""
    if isinstance(ts, datetime):
        at = ts
    else:
        try:
            at = datetime.fromisoformat(str(ts))
        except ValueError:
            return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
