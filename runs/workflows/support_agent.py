"""The flagship support agent: a conversation whose model looks orders up, proposes refunds that a
person approves before one refund is sent, and remembers preferences the customer confirmed.

Each user message (the conversation API) is one turn: the context builder gives the model the
dialog within a small budget (compacting the old part) plus the subject's remembered preferences;
the model (settings.BACKENDS["support_model"]) answers with tool calls until it replies. A refund
leaves the turn for an approval (the support inbox) and the payments operation, then the turn goes
on with its result. Amounts and currency come from the order, never from the model.
"""

from __future__ import annotations

import json
from typing import Any

from core.digests import json_digest
from core.errors import InvalidInput
from memory.procedures.shapes import argument_shape
from memory.selectors import memory_current_claim
from memory.services import ClaimHeld, memory_remember
from runs.authoring import (
    AWAITING_INPUT,
    AgentRun,
    Context,
    ContextBudget,
    OperationCall,
    State,
    StepResult,
    context_build,
    conversation_next_unanswered,
    task_enqueue,
    workflow,
)
from runs.workflows.refund.payments import PaymentsClient, PaymentsUnavailable
from runs.workflows.refund.workflow import PAYMENTS_REFUND
from runs.workflows.support_model import TOOL_RESULT, TOOLS, support_model_from_settings

# Small on purpose: a support dialog is short-lived context; older turns become summaries early.
SUPPORT_BUDGET = ContextBudget(
    memory=400, retrieval=0, recent=600, keep_recent=4, pinned_namespaces=("constraint", "preference")
)
MAX_TOOL_CALLS = 6  # per turn; a model that keeps calling tools gets a plain answer instead
SYSTEM_PROMPT = "You help the customers of an online shop with their orders. Be brief and exact."


def _validate_input(state: State) -> None:
    unknown = sorted(set(state) - {"system_prompt"})
    if unknown:
        raise InvalidInput(f"unknown input key(s) {', '.join(unknown)}; a support_agent takes system_prompt")
    prompt = state.get("system_prompt")
    if prompt is not None and (not isinstance(prompt, str) or len(prompt) > 10_000):
        raise InvalidInput(
            "input system_prompt must be a text of at most 10000 characters", code="invalid_input"
        )


support = workflow(
    "support_agent",
    version="1",
    validate_input=_validate_input,
    description="A support agent: a model with tools (order lookup, refund behind an approval, memory).",
)
support.approval_display(
    title="Refund {amount} for order {order_id} (proposed by the agent)",
    fields=[("order_id", "Order"), ("amount", "Amount")],
    amount=("amount_minor", "currency"),
    approve_label="Approve refund",
)


def _exchange(call: dict[str, Any]) -> list[dict[str, str]]:
    asked = {"tool": call["tool"], "arguments": call["arguments"]}
    done = {"tool": call["tool"], "result": call["result"]}
    return [
        {"role": "assistant", "content": json.dumps(asked, sort_keys=True)},
        {"role": "system", "content": TOOL_RESULT + json.dumps(done, sort_keys=True)},
    ]


def _lookup(ctx: Context, order_id: str) -> dict[str, Any]:
    canned = ctx.canned("lookup_order", {"order_id": order_id})  # a replay's answer, if it gives one
    if canned is not None:
        return canned
    try:
        order = PaymentsClient().get_order(order_id)
    except PaymentsUnavailable as exc:
        return {"error": f"the orders system is unavailable: {exc}"}
    return order if order is not None else {"error": f"there is no order {order_id}"}


def _remember(ctx: Context, run: AgentRun, seq: int, arguments: dict[str, Any]) -> dict[str, Any]:
    key, value = arguments.get("key", "").strip(), arguments.get("value", "").strip()
    canned = ctx.canned("remember", arguments)
    if canned is not None:
        return canned
    if ctx.replaying:  # an evaluation's replay changes nothing a customer's next conversation reads
        return {"key": key, "value": value, "replayed": True, "note": "not kept: a replay writes no memory"}
    if not run.subject:
        return {"error": "this conversation has no customer to remember anything for"}
    if not key or not value:
        return {"error": "remember needs a key and a value"}
    current = memory_current_claim(tenant=run.tenant, subject_id=run.subject, namespace="preference", key=key)
    if current is not None and current.value == value:  # this step ran before (or it was known)
        return {"memory_id": str(current.memory_id), "key": key, "value": value}
    provenance = {
        "source_type": "user_statement",
        "source_id": f"run:{run.run_id}",
        "source_version": None,
        "run_id": str(run.run_id),
        "event_seq": seq,
        "validation_method": "explicit_user_confirmation",
    }
    try:
        item = memory_remember(
            tenant=run.tenant,
            subject_id=run.subject,
            namespace="preference",
            key=key,
            value=value,
            provenance=provenance,
        )
    except ClaimHeld:
        return {"held": True, "note": "kept for a person's review before it is used"}
    except InvalidInput as exc:
        return {"error": exc.message}
    return {"memory_id": str(item.memory_id), "key": key, "value": value}


@support.step
def respond(ctx: Context, state: State) -> StepResult:
    message = conversation_next_unanswered(run_id=ctx.run_id)
    if message is None:
        return ctx.suspend(state, AWAITING_INPUT, "waiting for the customer's next message")
    run = AgentRun.objects.select_related("tenant").get(tenant_id=ctx.tenant_id, run_id=ctx.run_id)
    text = message.payload.get("content", "[erased]")
    context = context_build(
        run=run,
        system_prompt=state.get("system_prompt") or SYSTEM_PROMPT,
        tool_contracts=TOOLS,
        up_to_seq=message.seq,
        query=text if "content" in message.payload else "",
        budget=SUPPORT_BUDGET,
    )
    turn = state.get("turn") or {}
    if turn.get("seq") != message.seq:
        turn = {"seq": message.seq, "calls": []}
    calls: list[dict[str, Any]] = list(turn["calls"])
    model = support_model_from_settings()
    messages = [dict(m) for m in context.messages]
    for call in calls:
        messages.extend(_exchange(call))
    for _ in range(MAX_TOOL_CALLS):
        action = model.act(messages=messages, tools=TOOLS)
        if action.reply is not None:
            break
        asked: dict[str, Any] = {"tool": action.tool, "arguments": action.arguments}
        if action.tool == "propose_refund":
            order = _lookup(ctx, action.arguments.get("order_id", ""))
            refundable = (
                0 if "error" in order else int(order["amount_minor"]) - int(order.get("refunded_minor") or 0)
            )
            if "error" in order or refundable <= 0:
                asked["result"] = order if "error" in order else {"error": "nothing is left to refund"}
            else:
                request = {
                    "order_id": order["order_id"],
                    "amount_minor": refundable,
                    "currency": order["currency"],
                }
                reason = action.arguments.get("reason", "")[:300]
                return ctx.next(
                    approve,
                    {
                        **state,
                        "turn": {"seq": message.seq, "calls": calls, "proposal": asked},
                        "refund_request": request,
                        "request_digest": json_digest(request),
                        "refund_reasons": [f"proposed by {model.name}", *([reason] if reason else [])],
                    },
                )
        elif action.tool == "lookup_order":
            asked["result"] = _lookup(ctx, action.arguments.get("order_id", ""))
        else:
            asked["result"] = _remember(ctx, run, message.seq, action.arguments)
        calls.append(asked)
        messages.extend(_exchange(asked))
    reply = action.reply if action.reply is not None else "I could not finish that; a person will follow up."
    said: dict[str, Any] = {
        "content": reply,
        "in_reply_to": message.seq,
        "responder": model.name,
        "tools": [c["tool"] for c in calls],
        # What procedural memory learns from: each call's tool and argument types, never its values.
        "steps": [
            {"tool": c["tool"], "arguments": argument_shape(c["arguments"]), "ok": _worked(c.get("result"))}
            for c in calls
        ],
        "context_tokens": context.parts,
        "procedure": context.procedure,
    }
    rest = {k: v for k, v in state.items() if k != "turn"}
    if not ctx.replaying:  # a replay is not the tenant's work: it teaches no procedure
        task_enqueue(name="workers.tasks.learn_procedures", args=[str(ctx.run_id)])
    return ctx.next(respond, rest, say=("assistant_message", said))


def _worked(result: Any) -> bool:
    """A call that answered without an error, a refusal or a hold."""
    if not isinstance(result, dict):
        return False
    return "error" not in result and not result.get("held") and result.get("refunded") is not False


@support.step
def approve(ctx: Context, state: State) -> StepResult:
    request = state["refund_request"]
    if json_digest(request) != state["request_digest"]:
        return ctx.suspend(
            state, "request_digest_mismatch", "the refund request no longer matches its digest"
        )
    decision = ctx.approval(request, reasons=state["refund_reasons"])
    if not decision.approved:
        result = {"refunded": False, "note": decision.note or "a person rejected the refund"}
        return ctx.next(respond, _turn_goes_on({**state, **decision.state}, result))
    return ctx.next(refund, {**state, **decision.state})


@support.step(acts_on_approval=approve)
def refund(ctx: Context, state: State) -> StepResult:
    request = state["refund_request"]

    def send(call: OperationCall) -> dict[str, object]:
        return PaymentsClient().refund(**request, idempotency_key=call.idempotency_key, on_sent=call.sent)

    paid = ctx.operation(
        f"support-refund:{request['order_id']}", tool=PAYMENTS_REFUND, request=request, call=send
    )
    if paid.succeeded:
        result: dict[str, Any] = {
            "refunded": True,
            "refund_id": paid.external_ref,
            "amount_minor": request["amount_minor"],
            "currency": request["currency"],
        }
    else:
        refused = f"{paid.result.get('code', '')} {paid.result.get('message', '')}".strip()
        result = {"refunded": False, "error": f"the payments system refused the refund: {refused}"}
    return ctx.next(respond, _turn_goes_on(state, result))


def _turn_goes_on(state: State, result: dict[str, Any]) -> State:
    """The state back in the turn, the proposal's outcome as its newest tool result."""
    turn = state["turn"]
    call = {**turn["proposal"], "result": result}
    rest = {k: v for k, v in state.items() if k not in ("refund_request", "request_digest", "refund_reasons")}
    return {**rest, "turn": {"seq": turn["seq"], "calls": [*turn["calls"], call]}}


support_agent = support.register()
