"""Version 2 of test.deploy, as the next deployment ships it: the old version stays registered for the
runs pinned to it (this module imports version 1's)."""

from __future__ import annotations

import tests.runs.version_flows_v1  # noqa: F401 - the old version stays deployed beside the new one
from runs.authoring import Context, State, StepResult, workflow

deploy_v2 = workflow("test.deploy", version="2", description="Sleeps, checks, then says who finished.")


@deploy_v2.step
def hold(ctx: Context, state: State) -> StepResult:
    return ctx.sleep(check, state, seconds=state["seconds"])


@deploy_v2.step
def check(ctx: Context, state: State) -> StepResult:
    return ctx.next(finish, {**state, "checked": True})


@deploy_v2.step
def finish(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"finished_by": "v2", "checked": state["checked"]})


deploy_v2.register()
