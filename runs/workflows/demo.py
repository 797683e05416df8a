"""A small built-in workflow to see the engine move: count down from n, one step per tick."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import InvalidInput
from runs.engine.authoring import Context, State, StepResult, workflow

MAX_TICKS = 10_000


def _validate(data: State) -> None:
    n = data.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_TICKS:
        raise InvalidInput(f"'n' must be a whole number from 0 to {MAX_TICKS}", code="invalid_input")


@dataclass
class Count:
    n: int
    remaining: int = 0
    ticks: list[int] = field(default_factory=list)  # the revisions of the last 20 ticks


countdown_flow = workflow(
    "demo.countdown",
    version="1",
    state=Count,
    validate_input=_validate,
    description="Counts down from n, one committed step per tick.",
)


@countdown_flow.step
def start(ctx: Context, state: Count) -> StepResult:
    return ctx.next(tick if state.n else finish, Count(state.n, remaining=state.n))


@countdown_flow.step
def tick(ctx: Context, state: Count) -> StepResult:
    state = Count(state.n, state.remaining - 1, [*state.ticks, ctx.revision][-20:])
    return ctx.next(tick if state.remaining > 0 else finish, state)


@countdown_flow.step
def finish(ctx: Context, state: Count) -> StepResult:
    return ctx.complete(state, {"counted": state.n})


countdown = countdown_flow.register()
