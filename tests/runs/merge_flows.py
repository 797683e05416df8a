"""Workflows the merge tests declare: imported by the test process, and by worker processes through
KEEPER_WORKFLOW_MODULES=tests.runs.merge_flows.

`test.merge` drafts files, waits for a review, then revises them: a fork (a branch) applies
`branch_edits`, the run it was forked from `main_edits` (a path mapped to None deletes the file; a
value starting "hex:" is written as those bytes). A branch with `notify` sends one notice through an
operation that appends a line to a file on disk: a side effect outside Keeper that can be counted.
Then the run waits for its merge, and completes with its files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runs.authoring import (
    AgentRun,
    Context,
    Definition,
    MergeConflict,
    MergePick,
    OperationCall,
    State,
    StepResult,
    tool,
    workflow,
)

NOTIFY = tool("test.merge_notify", version="v1", lookup=None)


def _write(ctx: Context, files: dict[str, str | None]) -> None:
    for path, body in files.items():
        if body is None:
            ctx.workspace.delete(path)
        elif body.startswith("hex:"):
            ctx.workspace.write(path, bytes.fromhex(body[4:]))
        else:
            ctx.workspace.write(path, body)


def _declare(name: str) -> Definition[Any]:
    wf = workflow(name, version="1", description="Drafts files, revises them on a branch, merges back.")

    @wf.step
    def draft(ctx: Context, state: State) -> StepResult:
        _write(ctx, state.get("files", {}))
        return ctx.next(review, state)

    @wf.step
    def review(ctx: Context, state: State) -> StepResult:
        if not state.get("go"):
            return ctx.suspend({**state, "go": True}, "waiting_for_review")
        return ctx.next(revise, state)

    @wf.step
    def revise(ctx: Context, state: State) -> StepResult:
        branch = AgentRun.objects.filter(run_id=ctx.run_id, parent_run_id__isnull=False).exists()
        edits = state.get("branch_edits" if branch else "main_edits", {})
        _write(ctx, edits.get("files", {}))
        if branch and state.get("notify"):

            def call(_: OperationCall) -> dict[str, object]:
                with Path(state["notify"]).open("a") as ledger:
                    ledger.write(f"notice from {ctx.run_id}\n")
                return {"id": "sent"}

            ctx.operation(f"notice:{state['topic']}", tool=NOTIFY, request={"to": "ops"}, call=call)
        if "choice" in edits:
            state = {**state, "choice": edits["choice"]}
        return ctx.next(hold, state)

    @wf.step
    def hold(ctx: Context, state: State) -> StepResult:
        if not state.get("held"):
            return ctx.suspend({**state, "held": True}, "waiting_for_merge")
        files = {path: ctx.workspace.read(path).hex() for path in ctx.workspace.list()}
        return ctx.complete(state, {"files": files})

    return wf


merge = _declare("test.merge")
merge.register()

# The same workflow with a declared state rule (the target's choice wins) and a resolver that takes
# the branch's side of every conflict in a file named "auto/...", and leaves the others to a person.
ruled = _declare("test.merge_ruled")


@ruled.merge_state
def target_wins(base: State, ours: State, theirs: State) -> State:
    return {**theirs, "choice": ours.get("choice")}


@ruled.merge_resolver
def auto_theirs(conflict: MergeConflict) -> MergePick | None:
    return MergePick.theirs() if conflict.path.startswith("auto/") else None


ruled.register()
