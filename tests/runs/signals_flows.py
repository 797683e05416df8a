"""Workflows the signal and child-run tests declare: imported by the test process, and by worker
processes through KEEPER_WORKFLOW_MODULES=tests.runs.signals_flows."""

from __future__ import annotations

from typing import Any

from runs.engine.authoring import Context, State, StepResult, workflow

# --- a parcel waits for "shipped" (optionally with a timeout), then completes with the payload ---

parcel = workflow("test.parcel", version="1", signals=("shipped",), description="Waits for a signal.")
parcel.signal("recalled")


@parcel.step
def await_shipping(ctx: Context, state: State) -> StepResult:
    sig = ctx.wait_signal("shipped", timeout=state.get("timeout"))
    if sig.timed_out:
        return ctx.complete(state, {"timed_out": True})
    return ctx.next(delivered, {**state, "shipped": [*state.get("shipped", []), sig.payload]})


@parcel.step
def delivered(ctx: Context, state: State) -> StepResult:
    if len(state["shipped"]) < state.get("parcels", 1):
        return ctx.next(await_shipping, state)
    return ctx.complete(state, {"shipped": state["shipped"]})


@parcel.query
def progress(state: State) -> dict[str, Any]:
    return {"shipped": len(state.get("shipped", [])), "of": state.get("parcels", 1)}


parcel.register()
