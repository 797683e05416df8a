"""Workflows the workspace tests declare: imported by the test process, and by worker processes
through KEEPER_WORKFLOW_MODULES=tests.runs.workspace_flows."""

from __future__ import annotations

import time

from runs.engine.authoring import Context, State, StepResult, workflow

notes = workflow("test.workspace", version="1", description="Writes files over several steps.")


@notes.step
def plan(ctx: Context, state: State) -> StepResult:
    ctx.workspace.write("plan.md", f"# plan for {state['topic']}\n")
    return ctx.next(progress, state)


@notes.step
def progress(ctx: Context, state: State) -> StepResult:
    ctx.workspace.write("notes/progress.md", "step 2 done\n")
    return ctx.next(draft, state)


@notes.step
def draft(ctx: Context, state: State) -> StepResult:
    # Written, then the worker is killed on the first attempt: this write is never committed.
    ctx.workspace.write("draft.md", "half a draft\n")
    if ctx.attempt == 1 and state.get("sleep_s"):
        time.sleep(state["sleep_s"])
    seen = ctx.workspace.list()
    ctx.workspace.write("plan.md", ctx.workspace.read_text("plan.md") + "- revised\n")
    ctx.workspace.delete("draft.md")
    return ctx.next(wait, {**state, "seen_at_draft": seen})


@notes.step
def wait(ctx: Context, state: State) -> StepResult:
    if not state.get("go"):
        return ctx.suspend({**state, "go": True}, "waiting_for_review")
    return ctx.complete(state, {"files": ctx.workspace.list()})


notes.register()
