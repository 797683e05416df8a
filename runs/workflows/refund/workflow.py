"""Practicum 33.1: lookup_order → decide → approve → refund → verify, crash-safe at every point.

The refund is the one side effect. It runs under the operation protocol with the stable id
`refund:{order_id}` as idempotency key, so a crash anywhere (KEEPER_CRASH_AT: before_refund_call,
after_refund_request_sent, after_refund_response, after_checkpoint) resumes at the right step and
the payments ledger shows at most one refund per order.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.utils import timezone

from core.crash import crash_point
from core.digests import json_digest
from core.errors import InvalidInput
from runs.engine.approvals import ApprovalCheck, approval_check, approval_grant_automatically
from runs.engine.models import Approval
from runs.engine.operations import (
    OperationRequestChanged,
    operation_mark_failed,
    operation_mark_not_applied,
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
)
from runs.engine.registry import (
    Complete,
    Fail,
    Next,
    State,
    Step,
    StepContext,
    StepResult,
    Suspend,
    ToolContract,
    ToolLookup,
    Workflow,
    registry,
)
from runs.engine.selectors import operation_find
from runs.workflows.refund.deciders import decider_from_settings
from runs.workflows.refund.payments import (
    CONTRACT_VERSION,
    AmbiguousTransportError,
    PaymentRejected,
    PaymentsClient,
)
from runs.workflows.refund.schemas import REFUND_SCHEMAS

_CURRENCY = re.compile(r"^[A-Z]{3}$")


class RefundOutcomeUnknown(Exception):
    """The refund may have been applied; the step is retried, and the retry reconciles first."""


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


def lookup_order(ctx: StepContext, state: State) -> StepResult:
    order = PaymentsClient().get_order(state["order_id"])
    if order is None:
        return Fail(
            state, "order_not_found", f"order {state['order_id']} does not exist in the orders system"
        )
    return Next({**state, "order": order, "order_digest": json_digest(order)}, "decide")


def decide(ctx: StepContext, state: State) -> StepResult:
    order = state["order"]
    currency = state.get("currency") or order["currency"]
    if currency != order["currency"]:
        return Fail(
            state,
            "currency_mismatch",
            f"refund asked in {currency} but order {order['order_id']} was paid in {order['currency']}",
        )
    # A refund this very operation already made (before a crash, or in the run this one was forked
    # from) is ours: replaying decides the same request again instead of refusing it as over the
    # refundable amount (the order now counts it as refunded). The refund step then finds it done.
    own = operation_find(tenant_id=ctx.tenant_id, operation_id=f"refund:{order['order_id']}")
    done = (own.result or {}).get("amount_minor") if own is not None and own.status == "succeeded" else None
    if done:
        amount = state.get("amount_minor") or int(done)
    else:
        refundable = int(order["amount_minor"]) - int(order.get("refunded_minor") or 0)
        amount = state.get("amount_minor") or refundable
        if amount <= 0 or amount > refundable:
            return Fail(
                state,
                "amount_exceeds_refundable",
                f"refund of {amount} exceeds the refundable {refundable} {order['currency']}",
            )
    decision = decider_from_settings().decide(order=order, request=state)
    if decision.outcome != "refund":
        return Complete(
            {**state, "decision": decision.as_state()},
            {"refunded": False, "outcome": "denied", "reasons": decision.reasons},
        )
    request = {"order_id": order["order_id"], "amount_minor": amount, "currency": currency}
    return Next(
        {
            **state,
            "decision": decision.as_state(),
            "refund_request": request,
            "request_digest": json_digest(request),
        },
        "approve",
    )


def approve(ctx: StepContext, state: State) -> StepResult:
    request = state["refund_request"]
    if json_digest(request) != state["request_digest"]:
        return Suspend(state, "request_digest_mismatch", "the refund request no longer matches its digest")
    check = approval_check(
        run_id=ctx.run_id,
        tenant_id=ctx.tenant_id,
        step_id=ctx.step,
        request=request,
        request_digest=state["request_digest"],
        reasons=state["decision"]["reasons"],
        actor=ctx.lease.grant.owner,
    )
    if check.verdict == "wait" and request["amount_minor"] <= settings.KEEPER_REFUND_AUTO_APPROVE_MINOR:
        approval_grant_automatically(approval=check.approval, policy="auto_approve_below_limit")
        check = ApprovalCheck("use", check.approval)
    if check.verdict == "rejected":
        return Complete(
            {**state, "approval": _approval_ref(check.approval)},
            {"refunded": False, "outcome": "rejected", "note": check.approval.note},
        )
    if check.verdict == "wait":
        return Suspend({**state, "approval": _approval_ref(check.approval)}, check.reason, check.detail)
    return Next({**state, "approval": _approval_ref(check.approval)}, "refund")


def _approval_ref(approval: Approval) -> dict[str, Any]:
    return {
        "approval_id": str(approval.approval_id),
        "status": approval.status,
        "decided_by": approval.decided_by or None,
    }


def refund(ctx: StepContext, state: State) -> StepResult:
    """The chapter's refund_step: reconcile what may have happened before sending anything."""
    request = state["refund_request"]
    op_id = f"refund:{request['order_id']}"
    actor, run_key = ctx.lease.grant.owner, str(ctx.run_id)
    ids: dict[str, Any] = {"tenant_id": ctx.tenant_id, "operation_id": op_id, "actor": actor}
    client = PaymentsClient()
    try:
        op = operation_prepare_once(
            tenant_id=ctx.tenant_id,
            run_id=ctx.run_id,
            step_id=ctx.step,
            operation_id=op_id,
            tool_name="payments.refund",
            tool_contract_version=CONTRACT_VERSION,
            request=request,
            actor=actor,
        )
    except OperationRequestChanged as exc:
        return Suspend(state, exc.code, exc.message)
    if op.status == "succeeded":  # settled earlier: by this step before a crash, or by a person
        return Next(
            {**state, "refund": {**(op.result or {}), "refund_id": op.external_ref}, "operation_id": op_id},
            "verify",
        )
    if op.status == "failed":
        return Fail(state, "refund_rejected", f"the payments system refused the refund: {op.result}")
    if op.status in ("started", "unknown"):
        remote = client.lookup_by_idempotency_key(op_id)
        if remote.authoritative and remote.applied and remote.refund:
            operation_mark_succeeded(
                **ids,
                external_ref=remote.refund["refund_id"],
                result=remote.refund,
                note="reconciled: lookup found it applied",
            )
            return Next({**state, "refund": remote.refund, "operation_id": op_id}, "verify")
        if not remote.authoritative:
            if op.status == "started":
                operation_mark_unknown(**ids, note="lookup not authoritative")
            return Suspend(
                {**state, "operation_id": op_id},
                "reconciliation_required",
                f"refund {op_id} may have been applied and the payments lookup is not authoritative; "
                "check the payment and reconcile",
            )
        operation_mark_not_applied(**ids, note="reconciled: authoritative lookup says not applied")
    # About to send: the approval must still be approved, unexpired and for this very request.
    approval_id = (state.get("approval") or {}).get("approval_id")
    approval = Approval.objects.filter(approval_id=approval_id).first() if approval_id is not None else None
    if (
        approval is None
        or approval.status != "approved"
        or approval.expires_at <= timezone.now()
        or approval.request_digest != state["request_digest"]
    ):
        return Next({k: v for k, v in state.items() if k != "approval"}, "approve")
    crash_point("before_refund_call", key=run_key)
    operation_mark_started(
        tenant_id=ctx.tenant_id,
        operation_id=op_id,
        actor=actor,
        run_id=ctx.run_id,
        lease_epoch=ctx.lease.grant.epoch,
    )
    try:
        result = client.refund(
            order_id=request["order_id"],
            amount_minor=request["amount_minor"],
            currency=request["currency"],
            idempotency_key=op_id,
            on_sent=lambda: crash_point("after_refund_request_sent", key=run_key),
        )
    except PaymentRejected as exc:
        operation_mark_failed(**ids, result={"status": exc.status, "code": exc.code, "message": exc.message})
        return Fail(
            state, "refund_rejected", f"the payments system refused the refund: {exc.code} {exc.message}"
        )
    except AmbiguousTransportError as exc:
        operation_mark_unknown(**ids, note=str(exc)[:500])
        raise RefundOutcomeUnknown(f"refund {op_id}: {exc}") from None
    crash_point("after_refund_response", key=run_key)
    operation_mark_succeeded(**ids, external_ref=result["refund_id"], result=result)
    return Next({**state, "refund": result, "operation_id": op_id}, "verify")


def verify(ctx: StepContext, state: State) -> StepResult:
    ledger = PaymentsClient().refunds_for_order(state["refund_request"]["order_id"])
    ours = [r for r in ledger if r.get("idempotency_key") == state["operation_id"]]
    if len(ours) != 1 or ours[0].get("refund_id") != state["refund"]["refund_id"]:
        return Suspend(
            state,
            "verification_failed",
            f"the ledger shows {len(ours)} refund(s) for {state['operation_id']}, expected exactly one",
        )
    refund_row = ours[0]
    return Complete(
        state,
        {
            "refunded": True,
            "outcome": "refunded",
            "refund_id": refund_row["refund_id"],
            "amount_minor": refund_row["amount_minor"],
            "currency": refund_row["currency"],
        },
    )


def _lookup_refund(operation_id: str) -> ToolLookup:
    """The payments API's authoritative lookup, for resume verification."""
    remote = PaymentsClient().lookup_by_idempotency_key(operation_id)
    ref = remote.refund.get("refund_id") if remote.refund else None
    return ToolLookup(
        authoritative=remote.authoritative, applied=remote.applied, external_ref=ref, result=remote.refund
    )


registry.register_tool(ToolContract(name="payments.refund", version=CONTRACT_VERSION, lookup=_lookup_refund))

refund_workflow = registry.register(
    Workflow(
        name="refund",
        version="1",
        steps=(
            Step("lookup_order", lookup_order),
            Step("decide", decide),
            Step("approve", approve),
            Step("refund", refund),
            Step("verify", verify),
        ),
        validate_input=validate_input,
        description="Practicum 33.1: look up an order, decide, get approval, refund once, verify the ledger.",
        # The refund acts on the approval: resume checks it is still valid for the same request.
        approval_guarded_steps=frozenset({"refund"}),
        state_schema_version=3,
        schemas=REFUND_SCHEMAS,
    )
)
