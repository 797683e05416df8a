"""Workflows the authoring tests declare: imported by the test process, and by worker processes
through KEEPER_WORKFLOW_MODULES=tests.runs.authoring_flows."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from runs.authoring import Context, OperationCall, OperationRejected, State, StepResult, tool, workflow

# --- a durable timer: sleep, then finish ---

nap = workflow("test.nap", version="1", description="Sleeps state['seconds'], then completes.")


@nap.step
def doze(ctx: Context, state: State) -> StepResult:
    return ctx.sleep(wake, state, seconds=state["seconds"])


@nap.step
def wake(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"woke": True})


nap.register()

# --- a side effect through a tool that has no authoritative lookup ---


def _post_refund(request: dict[str, Any], key: str) -> Any:
    http = urllib.request.Request(
        settings.KEEPER_SANDBOX_URL + "/refunds",
        json.dumps(request).encode(),
        {"Content-Type": "application/json", "Idempotency-Key": key},
        method="POST",
    )
    try:
        with urllib.request.urlopen(http, timeout=settings.KEEPER_PAYMENTS_TIMEOUT) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500:
            raise OperationRejected(f"refused with {exc.code}", result={"status": exc.code}) from None
        raise


BLIND_REFUND = tool("test.blind_refund", version="v1", lookup=None, external_ref=lambda r: r["refund_id"])

blind = workflow("test.blind", version="1", description="One refund through a tool with no lookup.")


@blind.step
def send(ctx: Context, state: State) -> StepResult:
    request = {
        "order_id": state["order_id"],
        "amount_minor": state["amount_minor"],
        "currency": state["currency"],
    }

    def call(attempt: OperationCall) -> Any:
        return _post_refund(request, attempt.idempotency_key)

    outcome = ctx.operation(f"blind:{state['order_id']}", tool=BLIND_REFUND, request=request, call=call)
    return ctx.complete(
        state, {"status": outcome.status, "ref": outcome.external_ref, "result": outcome.result}
    )


blind.register()

# --- typed state: a dataclass in the steps, JSON in the run ---


@dataclass
class Tally:
    target: int
    counted: int = 0
    seen: list[int] = field(default_factory=list)


tally = workflow("test.tally", version="1", state=Tally, description="Counts to target over a typed state.")


@tally.step
def count(ctx: Context, state: Tally) -> StepResult:
    state = Tally(state.target, state.counted + 1, [*state.seen, ctx.revision])
    return ctx.next(count if state.counted < state.target else total, state)


@tally.step
def total(ctx: Context, state: Tally) -> StepResult:
    return ctx.complete(state, {"counted": state.counted})


tally.register()
