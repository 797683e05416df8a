"""A run's conversation as people read it: who said what in order, tool calls folded under the turn
that made them, the summary of older messages where one stands in for them, and what the agent
did in the turn a person is asked to decide. Built from the conversation's events and the run's state; reads only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from console.display import bounded, clip, money_major
from runs.conversations.selectors import conversation_transcript
from runs.kernel.models import AgentRun

ERASED = "[erased]"


@dataclass
class ToolUse:
    tool: str
    arguments: str  # "order_id=ord-1003"
    result: str  # a short text of the result ("" when not known)


@dataclass
class Said:
    """One message: the customer's, the agent's, a tool's, or the summary of older ones."""

    who: str  # customer, agent, tool, summary
    text: str
    seq: int | None
    at: datetime | None
    actor: str = ""
    tools: list[ToolUse] = field(default_factory=list)  # tool calls made for this answer


@dataclass
class Conversation:
    said: list[Said]
    tools_this_turn: list[ToolUse]  # the calls of the turn in progress (the agent has not answered yet)
    more: bool  # older messages are not shown

    def __bool__(self) -> bool:
        return bool(self.said)


def _arguments(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in list(value.items())[:8])
    return _short(value)


def _short(value: Any, limit: int = 200) -> str:
    if isinstance(value, str):
        return clip(value, limit)
    return clip(json.dumps(bounded(value, 3, 12), ensure_ascii=False, sort_keys=True), limit)


def _result(value: Any) -> str:
    """A tool's result in a few words where it is a known shape (an order, an error), else short JSON."""
    if isinstance(value, dict):
        if "error" in value:
            return f"error: {_short(value['error'])}"
        if "order_id" in value and "amount_minor" in value:
            status = value.get("status", "")
            amount = money_major(value.get("amount_minor"), value.get("currency"))
            return f"order {value['order_id']}: {status}, {amount}".replace(": , ", ": ")
        if value.get("held"):
            return "kept for a person's review before it is used"
        if "refunded" in value:
            return "refunded" if value.get("refunded") else f"not refunded: {_short(value.get('note', ''))}"
    return _short(value)


def _uses(calls: Any) -> list[ToolUse]:
    uses = []
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            uses.append(
                ToolUse(
                    tool=str(call.get("tool", "?")),
                    arguments=_arguments(call.get("arguments", {})),
                    result=_result(call["result"]) if "result" in call else "",
                )
            )
    return uses


def _text(payload: dict[str, Any]) -> str:
    if payload.get("redacted") or "content" not in payload:
        return ERASED
    return str(payload.get("content", ""))


def conversation_of(run: AgentRun) -> Conversation:
    """The run's conversation (empty when the run has none)."""
    transcript = conversation_transcript(run=run)
    summaries = list(transcript.summaries)
    said: list[Said] = []
    calls: dict[str, ToolUse] = {}
    first_shown = transcript.events[0].seq if transcript.events else None
    for summary in summaries:  # a summary stands for messages older than those shown
        if first_shown is None or summary.covers_to_seq < first_shown:
            said.append(Said("summary", summary.text, None, summary.created_at))
    for event in transcript.events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.event_type == "user_message":
            said.append(Said("customer", _text(payload), event.seq, event.created_at, event.actor))
        elif event.event_type == "assistant_message":
            tools = [ToolUse(tool=str(name), arguments="", result="") for name in payload.get("tools") or []]
            said.append(Said("agent", _text(payload), event.seq, event.created_at, event.actor, tools))
        elif event.event_type == "tool_call":
            use = ToolUse(str(payload.get("tool", "?")), _arguments(payload.get("arguments", {})), "")
            calls[str(payload.get("call_id", ""))] = use
            said.append(Said("tool", "", event.seq, event.created_at, event.actor, [use]))
        elif event.event_type == "tool_result":
            called = calls.get(str(payload.get("call_id", "")))
            preview = ERASED if payload.get("redacted") else str(payload.get("preview", ""))
            if called is not None:
                called.result = clip(preview, 300)
            else:
                said.append(
                    Said("tool", "", event.seq, event.created_at, event.actor, [ToolUse("?", "", preview)])
                )
    # The turn in progress keeps its tool calls in the state until the agent answers (support_agent).
    state = run.state if isinstance(run.state, dict) else {}
    turn = state.get("turn")
    if not isinstance(turn, dict):
        turn = {}
    return Conversation(
        said=said,
        tools_this_turn=_uses(turn.get("calls")),
        more=transcript.more,
    )
