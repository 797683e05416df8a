"""Workflows the workspace tests declare: imported by the test process, and by worker processes
through KEEPER_WORKFLOW_MODULES=tests.runs.workspace_flows."""

from __future__ import annotations

import time

from runs.authoring import Context, OperationCall, State, StepResult, tool, workflow
from runs.engine.workspace_models import WorkspaceSnapshot

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

# --- a side effect after a file was written: the workspace is snapshotted before it is sent ---

SNAPSHOTTED_TOOL = tool("test.workspace_notify", version="v1", lookup=None)
effect = workflow("test.workspace_effect", version="1", description="Writes a file, then sends a notice.")


@effect.step
def write_report(ctx: Context, state: State) -> StepResult:
    ctx.workspace.write("report.md", "ready to send\n")
    return ctx.next(send, state)


@effect.step
def send(ctx: Context, state: State) -> StepResult:
    def call(_: OperationCall) -> dict[str, object]:
        # What was durable when the side effect went out.
        kept = WorkspaceSnapshot.objects.filter(run_id=ctx.run_id).order_by("seq").last()
        return {"id": "n-1", "snapshot": None if kept is None else [kept.reason, sorted(kept.manifest)]}

    outcome = ctx.operation(f"notify:{ctx.run_id}", tool=SNAPSHOTTED_TOOL, request={"to": "ops"}, call=call)
    return ctx.complete(state, outcome.result)


effect.register()

# --- files and a stored blob named in the state, read again after a resume (possibly elsewhere) ---

reread = workflow("test.workspace_reread", version="1", description="Stores, suspends, reads back.")


@reread.step
def keep(ctx: Context, state: State) -> StepResult:
    from core.artifacts import artifact_put

    ctx.workspace.write("plan.md", f"# plan for {state['topic']}\n")
    report = artifact_put(
        tenant_id=ctx.tenant_id, data=f"report on {state['topic']}".encode(), kind="run_state"
    )
    return ctx.next(read_back, {**state, "report": report})


@reread.step
def read_back(ctx: Context, state: State) -> StepResult:
    from core.artifacts import artifact_get

    if not state.get("go"):
        return ctx.suspend({**state, "go": True}, "waiting_for_review")
    report = artifact_get(tenant_id=ctx.tenant_id, ref=state["report"]).decode()
    return ctx.complete(state, {"plan": ctx.workspace.read_text("plan.md"), "report": report})


reread.register()
