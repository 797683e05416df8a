"""The LangGraph support example: a rule-based model stand-in, an order look-up tool, an interrupt
for a person's approval, and memory of the outcome through the store (the `langgraph` extra;
offline, no model service).

Registered with Keeper as "support_example" (runs/apps.py), so an answer given in the support inbox is
resumed by a Keeper worker. Run it by hand with `support_thread_start`.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict
from uuid import UUID

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

GRAPH = "support_example"

# The order system of the example: a local table (the sandbox's payments API is for the refund workflow).
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {
        "order_id": "A-1001",
        "customer": "Ada",
        "amount_minor": 4200,
        "currency": "EUR",
        "state": "delivered",
    },
    "A-1002": {
        "order_id": "A-1002",
        "customer": "Ben",
        "amount_minor": 990,
        "currency": "EUR",
        "state": "in transit",
    },
    "A-1003": {
        "order_id": "A-1003",
        "customer": "Cleo",
        "amount_minor": 3900,
        "currency": "EUR",
        "state": "delivered",
    },
    "A-1004": {
        "order_id": "A-1004",
        "customer": "Dan",
        "amount_minor": 2500,
        "currency": "EUR",
        "state": "delivered",
    },
    "A-1005": {
        "order_id": "A-1005",
        "customer": "Eve",
        "amount_minor": 6400,
        "currency": "EUR",
        "state": "delivered",
    },
}
_ORDER_ID = re.compile(r"\b[A-Z]-\d{3,}\b")


class Ticket(TypedDict, total=False):
    message: str
    subject_id: str  # whom the ticket is about (the thread's configurable subject_id), for memory
    tool_call: dict[str, Any] | None
    order: dict[str, Any] | None
    approved: bool
    refund: dict[str, Any] | None  # what a person allowed (the proposal, or their edit of it)
    response: str | None  # a person's own words for the customer, instead of a decision
    reply: str


def model(state: Ticket, config: RunnableConfig) -> dict[str, Any]:
    """The model stand-in: rules, not a language model. An order id in the message -> call the tool."""
    # The subject goes into the state: a worker resuming the thread names only the thread.
    subject = {"subject_id": str(config["configurable"].get("subject_id") or state.get("subject_id") or "")}
    found = _ORDER_ID.search(state.get("message", ""))
    if found is None:
        return {
            **subject,
            "tool_call": None,
            "reply": "Which order is it about? Please give its number (like A-1001).",
        }
    return {**subject, "tool_call": {"name": "lookup_order", "args": {"order_id": found.group(0)}}}


def lookup_order(state: Ticket) -> dict[str, Any]:
    """The tool: the order by id, or None."""
    call = state.get("tool_call") or {}
    return {"order": ORDERS.get(str(call.get("args", {}).get("order_id", "")))}


def approval(state: Ticket) -> dict[str, Any]:
    """A person decides (the support inbox), as LangGraph's Agent Inbox asks: accept the refund,
    edit it (another amount), respond to the customer in their own words, or ignore it. Plain answers
    are taken too: "yes"/"no", true/false, or {"approved": ...}."""
    order = state.get("order") or {}
    refund = {
        "order_id": order.get("order_id"),
        "amount_minor": order.get("amount_minor", 0),
        "currency": order.get("currency", ""),
    }
    request = {
        "action_request": {"action": "refund", "args": refund},
        "config": {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": True},
        "description": f"Refund order {order.get('order_id')} of {order.get('amount_minor', 0) / 100:.2f} "
        f"{order.get('currency', '')} to {order.get('customer')}?",
        "order": order,
        "customer_said": state.get("message", ""),
    }
    answer = interrupt([request])
    return _decided(answer[0] if isinstance(answer, list) and answer else answer, refund)


def _decided(answer: Any, proposed: dict[str, Any]) -> dict[str, Any]:
    if isinstance(answer, dict) and answer.get("type") in ("accept", "edit", "response", "ignore"):
        kind, args = answer["type"], answer.get("args")
        if kind == "accept":
            return {"approved": True, "refund": proposed, "response": None}
        if kind == "edit" and isinstance(args, dict) and isinstance(args.get("args"), dict):
            return {"approved": True, "refund": {**proposed, **args["args"]}, "response": None}
        if kind == "response":
            return {"approved": False, "refund": None, "response": str(args or "")}
        return {"approved": False, "refund": None, "response": None}
    if isinstance(answer, dict):
        answer = answer.get("approved")
    approved = answer is True or (
        isinstance(answer, str) and answer.strip().lower() in {"yes", "y", "approve"}
    )
    return {"approved": approved, "refund": proposed if approved else None, "response": None}


def reply(state: Ticket, runtime: Runtime[None]) -> dict[str, Any]:
    order = state.get("order")
    refund = state.get("refund") or {}
    if order is None:
        text = "I could not find that order."
    elif state.get("response"):
        text = str(state["response"])  # a person's own words to the customer
    elif state.get("approved") and refund.get("amount_minor") not in (None, order.get("amount_minor")):
        amount = f"{int(refund['amount_minor']) / 100:.2f} {refund.get('currency', '')}"
        text = f"Your refund of {amount} for order {order['order_id']} is approved."
    elif state.get("approved"):
        text = f"Your refund for order {order['order_id']} is approved."
    else:
        text = f"Your refund for order {order['order_id']} was not approved; a colleague will write to you."
    # Memory: with a store compiled in (KeeperStore, runs/langgraph/memory_store.py), the outcome is
    # remembered about the ticket's subject, in memory namespace "support", by order; a ticket about
    # nobody, or a graph without a store, remembers nothing.
    subject = state.get("subject_id")
    if runtime.store is not None and order is not None and subject:
        runtime.store.put(
            ("memories", subject, "support"),
            order["order_id"],
            {"reply": text, "approved": bool(state.get("approved"))},
        )
    return {"reply": text}


def _after_model(state: Ticket) -> str:
    return "lookup_order" if state.get("tool_call") else END


def _after_lookup(state: Ticket) -> str:
    return "approval" if state.get("order") else "reply"


def support_graph(checkpointer: Any, store: Any = None) -> Any:
    """model -> lookup_order (tool) -> approval (interrupt) -> reply."""
    graph = StateGraph(Ticket)
    graph.add_node("model", model)
    graph.add_node("lookup_order", lookup_order)
    graph.add_node("approval", approval)
    graph.add_node("reply", reply)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _after_model, ["lookup_order", END])
    graph.add_conditional_edges("lookup_order", _after_lookup, ["approval", "reply"])
    graph.add_edge("approval", "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=checkpointer, store=store)


def support_thread_start(
    *, tenant_id: UUID, thread_id: str, message: str, subject_id: str = ""
) -> dict[str, Any]:
    """Start a thread of the example on Keeper; it stops at the approval and waits in the support inbox
    (a Keeper worker resumes it with the answer, with the tenant's KeeperStore: runs.langgraph.resume)."""
    from runs.langgraph.memory_store import KeeperStore
    from runs.langgraph.saver import KeeperSaver

    saver = KeeperSaver(tenant_id=tenant_id, graph=GRAPH)
    store = KeeperStore(tenant_id=tenant_id, actor=f"graph:{GRAPH}")
    try:
        configurable = {"thread_id": thread_id, **({"subject_id": subject_id} if subject_id else {})}
        graph = support_graph(saver, store=store)
        # Synchronous checkpoints: its refund node acts on the world (README, "durability").
        return dict(graph.invoke({"message": message}, {"configurable": configurable}, durability="sync"))
    finally:
        saver.close()
        store.close()
