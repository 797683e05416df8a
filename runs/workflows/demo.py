"""A small built-in workflow to see the engine move: count down from n, one step per tick."""

from __future__ import annotations

from core.errors import InvalidInput
from runs.authoring import Context, State, StepResult, workflow

MAX_TICKS = 10_000


def _validate(data: State) -> None:
    n = data.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_TICKS:
        raise InvalidInput(f"'n' must be a whole number from 0 to {MAX_TICKS}", code="invalid_input")


countdown_flow = workflow(
    "demo.countdown",
    version="1",
    validate_input=_validate,
    description="Counts down from n, one committed step per tick.",
)


@countdown_flow.step
def start(ctx: Context, state: State) -> StepResult:
    return ctx.next(tick if state["n"] else finish, {**state, "remaining": state["n"], "ticks": []})


@countdown_flow.step
def tick(ctx: Context, state: State) -> StepResult:
    remaining = state["remaining"] - 1
    state = {**state, "remaining": remaining, "ticks": [*state["ticks"], ctx.revision][-20:]}
    return ctx.next(tick if remaining > 0 else finish, state)


@countdown_flow.step
def finish(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"counted": state["n"]})


countdown = countdown_flow.register()
