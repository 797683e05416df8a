"""Conversation events on a run: user and assistant messages, tool calls and tool results.

Each is an agent_events row, appended idempotently by the client's message id. A large tool result
goes to the artifact store (the event keeps its digest and size, and a preview): nothing is dropped
silently. A message to a run waiting for input asks it to resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction

from core.artifacts import artifact_put
from core.digests import canonical_json
from core.errors import Conflict, InvalidInput
from core.models import Tenant
from core.tenancy import tenant_bound, tenant_of_call
from runs.conversations.sessions import session_append
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.registry import registry
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition, RunNotFound, SubjectErased
from runs.kernel.models import SUBJECT_ERASED, AgentEvent, AgentRun, RunStatus

CONVERSATION_EVENTS = ("user_message", "assistant_message", "tool_call", "tool_result")
AWAITING_INPUT = "awaiting_input"
MAX_MESSAGE_CHARS = 100_000
REPLY_WINDOW = 64  # the newest events read first to find the answered position


@dataclass(frozen=True)
class Appended:
    event: AgentEvent
    created: bool


def _payload(
    tenant_id: UUID, event_type: str, client_message_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    if event_type not in CONVERSATION_EVENTS:
        raise InvalidInput(
            f"event type must be one of {', '.join(CONVERSATION_EVENTS)}", code="invalid_event_type"
        )
    if not isinstance(client_message_id, str) or not 0 < len(client_message_id) <= 200:
        raise InvalidInput("client_message_id must be 1 to 200 characters", code="invalid_client_message_id")
    payload: dict[str, Any] = {"client_message_id": client_message_id}
    if "in_reply_to" in body and event_type != "assistant_message":
        raise InvalidInput(
            "only an assistant_message answers a message (in_reply_to)", code="invalid_in_reply_to"
        )
    if event_type in ("user_message", "assistant_message"):
        content = body.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput("a message needs non-empty text 'content'", code="invalid_content")
        if len(content) > MAX_MESSAGE_CHARS:
            raise InvalidInput(
                f"a message is at most {MAX_MESSAGE_CHARS} characters; send documents as tool "
                "results or retrieval sources",
                code="message_too_long",
            )
        if "in_reply_to" in body:  # the user message it answers, as its seq: a turn procedures learn from
            asked = body["in_reply_to"]
            if type(asked) is not int or asked < 1:
                raise InvalidInput(
                    "in_reply_to must be the seq of a user message", code="invalid_in_reply_to"
                )
            payload["in_reply_to"] = asked
        return {**payload, "content": content}
    call_id, tool = body.get("call_id"), body.get("tool")
    if not isinstance(call_id, str) or not call_id or not isinstance(tool, str) or not tool:
        raise InvalidInput("a tool event needs 'call_id' and 'tool'", code="invalid_tool_event")
    payload.update({"call_id": call_id, "tool": tool})
    if event_type == "tool_call":
        return {**payload, "arguments": body.get("arguments", {})}
    content = body.get("content", "")
    text = content if isinstance(content, str) else canonical_json(content)
    limit = settings.KEEPER_TOOL_RESULT_PREVIEW_CHARS
    truncated = len(text) > limit
    # The whole result is kept by digest; the event carries a preview the context can afford.
    ref = artifact_put(tenant_id=tenant_id, data=text.encode(), kind="tool_result") if truncated else None
    return {
        **payload,
        "preview": text[:limit],
        "content_ref": ref,
        "truncated": truncated,
        "is_error": bool(body.get("is_error", False)),
    }


@tenant_of_call
def conversation_append(
    *, tenant: Tenant, run_id: UUID, event_type: str, client_message_id: str, body: dict[str, Any], actor: str
) -> Appended:
    """Append one conversation event (or return the one already stored under that message id)."""
    payload = _payload(tenant.tenant_id, event_type, client_message_id, body)
    # A run its own process drives (a LangGraph thread) never reads the messages appended to it:
    # refused like a resume or a fork, not stored for nobody.
    workflow = (
        AgentRun.objects.filter(run_id=run_id, tenant=tenant).values_list("workflow_name", flat=True).first()
    )
    if workflow is not None:
        registry.refuse_outside(workflow_name=workflow, run_id=run_id, action="sent messages")
    asked = payload.get("in_reply_to")
    if (
        asked is not None
        and not AgentEvent.objects.filter(
            tenant_id=tenant.tenant_id, run_id=run_id, seq=asked, event_type="user_message"
        ).exists()
    ):
        raise InvalidInput(
            f"in_reply_to {asked} is not a user message of run {run_id}", code="invalid_in_reply_to"
        )
    existing = AgentEvent.objects.filter(
        tenant_id=tenant.tenant_id, run_id=run_id, client_message_id=client_message_id
    ).first()
    if existing is not None:
        return _the_same_again(existing, event_type, payload)
    try:
        with transaction.atomic():
            seq = apply(
                m.MessageAppended(run_id, tenant.tenant_id, event_type, payload, actor, client_message_id)
            )
            if seq is None:
                run = AgentRun.objects.filter(run_id=run_id, tenant=tenant).first()
                if run is None:
                    raise RunNotFound(f"no run {run_id} for tenant {tenant.slug}")
                if run.suspend_reason == SUBJECT_ERASED:
                    raise SubjectErased(
                        f"run {run_id} takes no messages: its subject was erased; start a new run",
                        details={"status": run.status, "suspend_reason": run.suspend_reason},
                    )
                raise InvalidTransition(
                    f"run {run_id} is {run.status}; messages go to running or suspended runs",
                    details={"status": run.status},
                )
            if event_type == "user_message":
                _wake_if_waiting(run_id=run_id, tenant_id=tenant.tenant_id, actor=actor)
    except IntegrityError:  # the same message id, appended concurrently: that one stands
        existing = AgentEvent.objects.get(
            tenant_id=tenant.tenant_id, run_id=run_id, client_message_id=client_message_id
        )
        return _the_same_again(existing, event_type, payload)
    event = AgentEvent.objects.get(tenant_id=tenant.tenant_id, run_id=run_id, seq=seq)
    session_append(run=AgentRun.objects.get(run_id=run_id, tenant=tenant), event=event)
    return Appended(event, created=True)


def _the_same_again(existing: AgentEvent, event_type: str, payload: dict[str, Any]) -> Appended:
    """A message id sent again with the same message is a no-op; with another message it is a
    mistake the client must hear about (409), never a silent drop of what it sent."""
    if existing.payload.get("redacted"):  # erased since: nothing left to compare, and nothing to add
        return Appended(existing, created=False)

    def same(key: str, value: Any) -> bool:
        held = existing.payload.get(key)
        if key == "content_ref" and isinstance(held, dict) and isinstance(value, dict):
            return held.get("digest") == value.get("digest")  # older references also held a path
        return bool(held == value)

    if existing.event_type != event_type or not all(same(k, v) for k, v in payload.items()):
        raise Conflict(
            f"client_message_id {payload['client_message_id']!r} was already used for another message "
            f"(event {existing.seq}); send a new id for a new message",
            code="client_message_id_reused",
            details={"seq": existing.seq},
        )
    return Appended(existing, created=False)


def conversation_copy(
    *, parent: AgentRun, child_id: UUID, at_seq: int, next_step: str, state_digest: str
) -> int:
    """Give a new fork the parent's conversation up to `at_seq` as its own events (seq 2 on).

    Each copy names its source (`forked_from`: run and seq); a reply's `in_reply_to` is renumbered
    to the child's seq of the message it answers, so the child's answered position is its own. What
    the parent spent stays with the parent's events (the fork's first event carries the total).
    Returns how many events were copied.
    """
    return apply(
        m.EventsCopied(
            run_id=child_id,
            tenant_id=parent.tenant_id,
            source_run_id=parent.run_id,
            up_to_seq=at_seq,
            event_types=tuple(CONVERSATION_EVENTS),
        )
    )


def conversation_next_unanswered(*, run_id: UUID) -> AgentEvent | None:
    """The run's first user message that no assistant message of this run answers.

    Turns are answered one at a time in seq order, so every user message up to the newest one this
    run's replies answer is answered. The replies are looked for among the newest events first (a
    seq range of the run's index, widened only when it holds none), not in the whole log, so a
    turn's cost does not grow with the conversation."""
    tenant_id = tenant_bound()  # a step works as its run's tenant
    runs = AgentRun.objects.filter(tenant_id=tenant_id, run_id=run_id)
    top = runs.values_list("state_revision", flat=True).first() or 0
    events = AgentEvent.objects.filter(tenant_id=tenant_id, run_id=run_id)
    replies = events.filter(event_type="assistant_message", payload__has_key="in_reply_to")
    user_messages = events.filter(event_type="user_message").order_by("seq")
    span = REPLY_WINDOW
    while True:
        low = max(0, top - span)
        answered = [
            seq
            for seq in replies.filter(seq__gt=low).values_list("payload__in_reply_to", flat=True)
            if isinstance(seq, int)
        ]
        if answered:
            return user_messages.filter(seq__gt=max(answered)).first()
        if low == 0:
            return user_messages.first()  # no reply of this run answers any message yet
        span *= 4


def _wake_if_waiting(*, run_id: UUID, tenant_id: UUID, actor: str) -> None:
    seq = apply(
        m.StatusChanged(
            run_id=run_id,
            tenant_id=tenant_id,
            from_statuses=(RunStatus.SUSPENDED,),
            to_status=RunStatus.SUSPENDED,
            event_type="resume_requested",
            actor=actor,
            payload={"trigger": "user_message"},
            request_resume=True,
            only_if_reason=AWAITING_INPUT,
        )
    )
    if seq is not None:
        run_enqueue_on_commit(run_id=run_id)
