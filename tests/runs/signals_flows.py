"""Workflows the signal and child-run tests declare: imported by the test process, and by worker
processes through KEEPER_WORKFLOW_MODULES=tests.runs.signals_flows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.authoring import Context, State, StepResult, workflow

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


@parcel.query
def broken(state: State) -> dict[str, Any]:
    return {"eta": state["eta"]}  # no run has an eta: a query that breaks


parcel.register()

# --- child runs: a parent starts a child, moves on, then waits for the child's result ---

echo = workflow(
    "test.echo", version="1", signals=("go",), description="Echoes its value (after 'go' if held)."
)


@echo.step
def answer(ctx: Context, state: State) -> StepResult:
    if state.get("hold"):
        ctx.wait_signal("go")
    if state.get("fail"):
        return ctx.fail(state, "echo_refused", "asked to fail")
    return ctx.complete(state, {"echo": state["value"]})


echo.register()

family = workflow("test.family", version="1", description="Starts a child, then waits for it.")


def _child(ctx: Context, state: State):
    return ctx.start_child(
        state.get("child_workflow", echo.name),
        input={k: state[k] for k in ("value", "hold", "fail") if k in state},
        child_id="echo",
    )


@family.step
def spawn(ctx: Context, state: State) -> StepResult:
    child = _child(ctx, state)
    return ctx.next(collect, {**state, "child": str(child.run_id)})


@family.step
def collect(ctx: Context, state: State) -> StepResult:
    outcome = ctx.wait_child(_child(ctx, state))  # the same child again: started once, by its key
    return ctx.complete(
        state, {"child": str(outcome.run_id), "status": outcome.status, "result": outcome.result}
    )


family.register()

# --- two waits in one step; a typed state that loops over waits ---

pair = workflow("test.pair", version="1", signals=("left", "right"), description="Waits for two signals.")


@pair.step
def both(ctx: Context, state: State) -> StepResult:
    left = ctx.wait_signal("left")
    right = ctx.wait_signal("right")
    return ctx.complete(state, {"left": left.payload, "right": right.payload})


pair.register()


@dataclass
class Pings:
    wanted: int
    got: list[Any] = field(default_factory=list)


pinger = workflow("test.pinger", version="1", state=Pings, signals=("ping",), description="Typed state.")


@pinger.step
def take(ctx: Context, state: Pings) -> StepResult:
    ping = ctx.wait_signal("ping")
    return ctx.next(tally_pings, Pings(state.wanted, [*state.got, ping.payload]))


@pinger.step
def tally_pings(ctx: Context, state: Pings) -> StepResult:
    return ctx.next(take, state) if len(state.got) < state.wanted else ctx.complete(state, {"got": state.got})


pinger.register()
