"""A credit-limit increase: assess, a person approves the new limit (small ones are approved by
policy), wait for the customer's documents (a signal), then apply. No side effect outside Keeper: the
demo's second kind of approval, declared to read as what it is, and its signal and query."""

from __future__ import annotations

import re

from core.errors import InvalidInput
from runs.authoring import Context, State, StepResult, workflow

AUTO_APPROVE_INCREASE_MINOR = 50_000  # an increase up to 500.00 is approved by policy
DOCUMENTS = "documents_received"
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def _validate(data: State) -> None:
    unknown = sorted(set(data) - {"customer_id", "current_limit_minor", "requested_limit_minor", "currency"})
    if unknown:
        raise InvalidInput(f"unknown input key(s) {', '.join(unknown)}", code="invalid_input")
    for key in ("current_limit_minor", "requested_limit_minor"):
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"'{key}' must be a whole number of minor units", code="invalid_input")
    if data["requested_limit_minor"] <= data["current_limit_minor"]:
        raise InvalidInput("the requested limit must be above the current one", code="invalid_input")
    if not isinstance(data.get("currency"), str) or not _CURRENCY.match(data["currency"]):
        raise InvalidInput("'currency' must be a three-letter ISO code such as EUR", code="invalid_input")
    if not isinstance(data.get("customer_id"), str) or not 0 < len(data["customer_id"]) <= 100:
        raise InvalidInput("'customer_id' must be a string of 1 to 100 characters", code="invalid_input")


credit = workflow(
    "demo.credit",
    version="1",
    validate_input=_validate,
    description="Raise a customer's credit limit: a person approves it, the customer's documents arrive, "
    "then it applies.",
    signals=(DOCUMENTS,),
)
credit.approval_display(
    title="Raise the credit limit of {customer_id} to {amount}",
    fields=[
        ("customer_id", "Customer"),
        ("current_limit", "Current limit"),
        ("amount", "New limit"),
        ("increase", "Increase"),
    ],
    amount=("requested_limit_minor", "currency"),
    approve_label="Approve the new limit",
    reject_label="Keep the current limit",
)


@credit.step
def assess(ctx: Context, state: State) -> StepResult:
    increase = state["requested_limit_minor"] - state["current_limit_minor"]
    request = {
        "customer_id": state["customer_id"],
        "current_limit": f"{state['current_limit_minor'] / 100:,.2f} {state['currency']}",
        "requested_limit_minor": state["requested_limit_minor"],
        "currency": state["currency"],
        "increase": f"{increase / 100:,.2f} {state['currency']}",
    }
    return ctx.next(approve, {**state, "request": request, "increase_minor": increase})


@credit.step
def approve(ctx: Context, state: State) -> StepResult:
    small = state["increase_minor"] <= AUTO_APPROVE_INCREASE_MINOR
    decision = ctx.approval(
        state["request"],
        reasons=[f"an increase of {state['request']['increase']}", "no missed payment in 12 months"],
        auto_approve="auto_approve_small_increase" if small else None,
    )
    if not decision.approved:
        return ctx.complete({**state, **decision.state}, {"raised": False, "note": decision.note})
    return ctx.next(wait_for_documents, {**state, **decision.state})


@credit.step
def wait_for_documents(ctx: Context, state: State) -> StepResult:
    received = ctx.wait_signal(DOCUMENTS)
    documents = (received.payload or {}).get("documents") if isinstance(received.payload, dict) else None
    return ctx.next(apply, {**state, "documents": documents if isinstance(documents, list) else []})


@credit.step
def apply(ctx: Context, state: State) -> StepResult:
    return ctx.complete(
        state,
        {
            "raised": True,
            "limit_minor": state["requested_limit_minor"],
            "currency": state["currency"],
            "documents": state.get("documents", []),
        },
    )


@credit.query
def progress(state: State) -> dict[str, object]:
    """Where the increase stands, in words."""
    approval = state.get("approval")
    if not isinstance(approval, dict):
        approval = {}
    if "documents" in state:
        stage = "documents received"
    elif approval.get("status") == "approved":
        stage = "waiting for documents"
    elif approval.get("status") == "rejected":
        stage = "rejected"
    else:
        stage = "waiting for approval"
    return {"stage": stage, "requested_limit_minor": state.get("requested_limit_minor")}


credit_workflow = credit.register()
