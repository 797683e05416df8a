"""Version 1 of test.deploy, as a first deployment ships it (KEEPER_WORKFLOW_MODULES of worker processes)."""

from __future__ import annotations

from runs.authoring import Context, State, StepResult, workflow

deploy_v1 = workflow(
    "test.deploy", version="1", description="Sleeps state['seconds'], then says who finished."
)


@deploy_v1.step
def hold(ctx: Context, state: State) -> StepResult:
    return ctx.sleep(finish, state, seconds=state["seconds"])


@deploy_v1.step
def finish(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"finished_by": "v1"})


deploy_v1.register()
