"""Practicum 33.1: lookup_order → decide → approve → refund → verify, crash-safe at every point.

The refund is the one side effect. It runs under the operation protocol with the stable id
`refund:{order_id}` as idempotency key, so a crash anywhere (KEEPER_CRASH_AT: before_refund_call,
after_refund_request_sent, after_refund_response, after_checkpoint) resumes at the right step and
the payments ledger shows at most one refund per order. A second run for an order another run
refunded fails at decide (order_refunded_by_another_run).
"""

from __future__ import annotations

import re

from django.conf import settings

from core.digests import json_digest
from core.errors import InvalidInput
from runs.authoring import (
    Context,
    OperationCall,
    State,
    StepResult,
    ToolLookup,
    operation_find,
    run_lineage,
    tool,
    workflow,
)
from runs.workflows.refund.deciders import decider_from_settings
from runs.workflows.refund.payments import CONTRACT_VERSION, PaymentsClient
from runs.workflows.refund.schemas import REFUND_SCHEMAS

_CURRENCY = re.compile(r"^[A-Z]{3}$")


INPUT_KEYS = frozenset({"order_id", "amount_minor", "currency", "reason", "budgets"})


def validate_input(data: State) -> None:
    unknown = sorted(set(data) - INPUT_KEYS)
    if unknown:
        raise InvalidInput(
            f"unknown input key(s) {', '.join(unknown)}; a refund takes {', '.join(sorted(INPUT_KEYS))}",
            code="invalid_input",
        )
    order_id = data.get("order_id")
    if not isinstance(order_id, str) or not 0 < len(order_id) <= 100:
        raise InvalidInput("'order_id' must be a string of 1 to 100 characters", code="invalid_order_id")
    amount = data.get("amount_minor")
    if amount is not None and (not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0):
        raise InvalidInput(
            "'amount_minor' must be a positive whole number of minor units (cents)", code="invalid_amount"
        )
    currency = data.get("currency")
    if currency is not None and (not isinstance(currency, str) or not _CURRENCY.match(currency)):
        raise InvalidInput("'currency' must be a three-letter ISO code such as EUR", code="invalid_currency")
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 2000:
        raise InvalidInput("'reason' must be text of at most 2000 characters", code="invalid_reason")


def _lookup_refund(operation_id: str) -> ToolLookup:
    """The payments API's authoritative lookup by idempotency key (also used by resume verification)."""
    remote = PaymentsClient().lookup_by_idempotency_key(operation_id)
    ref = remote.refund.get("refund_id") if remote.refund else None
    return ToolLookup(
        authoritative=remote.authoritative, applied=remote.applied, external_ref=ref, result=remote.refund
    )


PAYMENTS_REFUND = tool(
    "payments.refund",
    version=CONTRACT_VERSION,
    lookup=_lookup_refund,
    external_ref=lambda result: str(result["refund_id"]),
    crash_label="refund",
    # The payments client's own timeout: a refund call never lasts longer (payments.py).
    call_timeout_s=lambda: float(settings.KEEPER_PAYMENTS_TIMEOUT),
)

refund_flow = workflow(
    "refund",
    version="1",
    validate_input=validate_input,
    description="Practicum 33.1: look up an order, decide, get approval, refund once, verify the ledger.",
    schemas=REFUND_SCHEMAS,
)


@refund_flow.step
def lookup_order(ctx: Context, state: State) -> StepResult:
    order = PaymentsClient().get_order(state["order_id"])
    if order is None:
        return ctx.fail(
            state, "order_not_found", f"order {state['order_id']} does not exist in the orders system"
        )
    return ctx.next(decide, {**state, "order": order, "order_digest": json_digest(order)})


@refund_flow.step
def decide(ctx: Context, state: State) -> StepResult:
    order = state["order"]
    currency = state.get("currency") or order["currency"]
    if currency != order["currency"]:
        return ctx.fail(
            state,
            "currency_mismatch",
            f"refund asked in {currency} but order {order['order_id']} was paid in {order['currency']}",
        )
    # A refund this very operation already made (before a crash, or in the run this one was forked
    # from) is ours: replaying decides the same request again instead of refusing it as over the
    # refundable amount (the order now counts it as refunded). The refund step then finds it done.
    own = operation_find(tenant_id=ctx.tenant_id, operation_id=f"refund:{order['order_id']}")
    if own is not None and own.run_id not in run_lineage(ctx.run_id):
        # Another run's refund of this order (made, under way, or refused): the operation id is the
        # order's, so this run could only report that run's outcome as its own. Said before anyone
        # is asked to approve.
        return ctx.fail(
            state,
            "order_refunded_by_another_run",
            f"order {order['order_id']} already has a refund ({own.status}) by run {own.run_id}; "
            f"this workflow refunds an order once (operation refund:{order['order_id']})",
        )
    done = (own.result or {}).get("amount_minor") if own is not None and own.status == "succeeded" else None
    if done:
        amount = state.get("amount_minor") or int(done)
    else:
        refundable = int(order["amount_minor"]) - int(order.get("refunded_minor") or 0)
        amount = state.get("amount_minor") or refundable
        if amount <= 0 or amount > refundable:
            return ctx.fail(
                state,
                "amount_exceeds_refundable",
                f"refund of {amount} exceeds the refundable {refundable} {order['currency']}",
            )
    decision = decider_from_settings().decide(order=order, request=state)
    if decision.outcome != "refund":
        return ctx.complete(
            {**state, "decision": decision.as_state()},
            {"refunded": False, "outcome": "denied", "reasons": decision.reasons},
        )
    request = {"order_id": order["order_id"], "amount_minor": amount, "currency": currency}
    return ctx.next(
        approve,
        {
            **state,
            "decision": decision.as_state(),
            "refund_request": request,
            "request_digest": json_digest(request),
        },
    )


@refund_flow.step
def approve(ctx: Context, state: State) -> StepResult:
    request = state["refund_request"]
    if json_digest(request) != state["request_digest"]:
        return ctx.suspend(
            state, "request_digest_mismatch", "the refund request no longer matches its digest"
        )
    small = request["amount_minor"] <= settings.KEEPER_REFUND_AUTO_APPROVE_MINOR
    decision = ctx.approval(
        request,
        reasons=state["decision"]["reasons"],
        auto_approve="auto_approve_below_limit" if small else None,
    )
    if not decision.approved:
        return ctx.complete(
            {**state, **decision.state}, {"refunded": False, "outcome": "rejected", "note": decision.note}
        )
    return ctx.next(refund, {**state, **decision.state})


@refund_flow.step(acts_on_approval=approve)
def refund(ctx: Context, state: State) -> StepResult:
    """The chapter's refund_step: the operation reconciles what may have happened before sending."""
    request = state["refund_request"]
    op_id = f"refund:{request['order_id']}"

    def send(call: OperationCall) -> dict[str, object]:
        return PaymentsClient().refund(**request, idempotency_key=call.idempotency_key, on_sent=call.sent)

    paid = ctx.operation(op_id, tool=PAYMENTS_REFUND, request=request, call=send)
    if not paid.succeeded:
        refused = f"{paid.result.get('code', '')} {paid.result.get('message', '')}".strip() or paid.result
        return ctx.fail(state, "refund_rejected", f"the payments system refused the refund: {refused}")
    return ctx.next(
        verify,
        {**state, "refund": {**(paid.result or {}), "refund_id": paid.external_ref}, "operation_id": op_id},
    )


@refund_flow.step
def verify(ctx: Context, state: State) -> StepResult:
    ledger = PaymentsClient().refunds_for_order(state["refund_request"]["order_id"])
    ours = [r for r in ledger if r.get("idempotency_key") == state["operation_id"]]
    if len(ours) != 1:
        return ctx.suspend(
            state,
            "verification_failed",
            f"the ledger shows {len(ours)} refund(s) for {state['operation_id']}, expected exactly one",
        )
    if ours[0].get("refund_id") != state["refund"]["refund_id"]:
        # The one refund is another id than the run recorded (a reconciliation that named the wrong
        # reference): say so, rather than count refunds that are there.
        return ctx.suspend(
            state,
            "verification_failed",
            f"the ledger's refund for {state['operation_id']} is {ours[0].get('refund_id')!r}, "
            f"but the run recorded {state['refund']['refund_id']!r}",
        )
    refund_row = ours[0]
    return ctx.complete(
        state,
        {
            "refunded": True,
            "outcome": "refunded",
            "refund_id": refund_row["refund_id"],
            "amount_minor": refund_row["amount_minor"],
            "currency": refund_row["currency"],
        },
    )


refund_workflow = refund_flow.register()
