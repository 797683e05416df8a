"""A small built-in workflow to see the engine move: count down from n, one step per tick."""

from __future__ import annotations

from core.errors import InvalidInput
from runs.engine.registry import Complete, Next, State, Step, StepContext, StepResult, Workflow, registry

MAX_TICKS = 10_000


def _validate(data: State) -> None:
    n = data.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_TICKS:
        raise InvalidInput(f"'n' must be a whole number from 0 to {MAX_TICKS}", code="invalid_input")


def start(ctx: StepContext, state: State) -> StepResult:
    return Next({**state, "remaining": state["n"], "ticks": []}, "tick" if state["n"] else "finish")


def tick(ctx: StepContext, state: State) -> StepResult:
    remaining = state["remaining"] - 1
    state = {**state, "remaining": remaining, "ticks": [*state["ticks"], ctx.revision][-20:]}
    return Next(state, "tick" if remaining > 0 else "finish")


def finish(ctx: StepContext, state: State) -> StepResult:
    return Complete(state, {"counted": state["n"]})


countdown = registry.register(
    Workflow(
        name="demo.countdown",
        version="1",
        steps=(Step("start", start), Step("tick", tick), Step("finish", finish)),
        validate_input=_validate,
        description="Counts down from n, one committed step per tick.",
    )
)
