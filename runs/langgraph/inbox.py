"""LangGraph's Agent Inbox convention for an interrupt(): what a person may do with it and the answer
each choice sends back.

A graph that calls `interrupt([request])` (or `interrupt(request)`) with a HumanInterrupt, as
langgraph.prebuilt.interrupt describes it,

    {"action_request": {"action": "refund", "args": {...}},
     "config": {"allow_accept": true, "allow_edit": true, "allow_respond": true, "allow_ignore": true},
     "description": "Refund order A-1001 of 42.00 EUR to Ada?"}

gets back a HumanResponse ({"type": "accept" | "edit" | "response" | "ignore", "args": ...}), in a list
when it asked with a list. Any other interrupt value is not this convention (the console answers it
as text or JSON). No LangGraph import: this reads and writes plain JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput

CHOICES = ("accept", "edit", "response", "ignore")
_ALLOWED = {
    "accept": "allow_accept",
    "edit": "allow_edit",
    "response": "allow_respond",
    "ignore": "allow_ignore",
}


@dataclass(frozen=True)
class InboxRequest:
    """One HumanInterrupt: the proposed action and what the person may do with it."""

    action: str
    args: dict[str, Any]
    description: str
    allowed: tuple[str, ...]  # of CHOICES, in that order
    context: dict[str, Any]  # the request's other keys (what the graph added for the reader)
    listed: bool  # asked as [request]: the answer goes back as [response]


def _request(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    action = value.get("action_request")
    if not isinstance(action, dict) or not isinstance(action.get("action"), str):
        return None
    if not isinstance(action.get("args", {}), dict) or not isinstance(value.get("config", {}), dict):
        return None
    return value


def inbox_request(value: Any) -> InboxRequest | None:
    """The interrupt value as an Agent Inbox request, or None when it follows another convention."""
    listed = isinstance(value, list)
    if listed and len(value) != 1:
        return None  # several requests in one interrupt: answered as JSON
    found = _request(value[0] if listed else value)
    if found is None:
        return None
    config = found.get("config") or {}
    action = found["action_request"]
    return InboxRequest(
        action=action["action"],
        args=dict(action.get("args") or {}),
        description=str(found.get("description") or ""),
        allowed=tuple(choice for choice in CHOICES if config.get(_ALLOWED[choice]) is True),
        context={k: v for k, v in found.items() if k not in ("action_request", "config", "description")},
        listed=listed,
    )


def inbox_answer(
    request: InboxRequest, choice: str, *, args: dict[str, Any] | None = None, text: str = ""
) -> Any:
    """The HumanResponse for the person's choice (InvalidInput: a choice the graph does not allow)."""
    if choice not in request.allowed:
        allowed = ", ".join(request.allowed) or "nothing"
        raise InvalidInput(f"this question allows {allowed}, not {choice}", code="choice_not_allowed")
    if choice == "edit":
        response: dict[str, Any] = {"type": "edit", "args": {"action": request.action, "args": args or {}}}
    elif choice == "response":
        if not text.strip():
            raise InvalidInput("a response needs words", code="response_required")
        response = {"type": "response", "args": text}
    else:
        response = {"type": choice, "args": None}
    return [response] if request.listed else response


def inbox_summary(value: Any) -> str | None:
    """The line an inbox shows for such a request: its description, else its action (None: not one)."""
    request = inbox_request(value)
    if request is None:
        return None
    return request.description.strip().splitlines()[0] if request.description.strip() else request.action
