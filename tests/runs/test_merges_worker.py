"""A merge with real worker processes: a branch that sent a notice (a side effect outside Keeper) is
merged into its parent, and the parent, run on by a worker to the end, never sends it again."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.runs.merge_flows  # noqa: F401 - registers test.merge in this process
from runs.engine.forks import run_fork
from runs.engine.merges import run_merge
from runs.engine.runs import run_resume, run_start
from runs.engine.workspace import workspace_files_at
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.processes import wait_until

ENV = {"KEEPER_WORKFLOW_MODULES": "tests.runs.merge_flows"}


def _waits(run_id, reason: str, *, files: set[str]) -> None:
    """Until the run waits for `reason` with these files saved (a suspension's snapshot is written
    right after it commits, and only when a step since the last one wrote a file)."""

    def there() -> bool:
        run = AgentRun.objects.get(run_id=run_id)
        _, saved = workspace_files_at(run_id=run_id)
        return run.status == "suspended" and run.suspend_reason == reason and files <= set(saved)

    wait_until(there, timeout=90, message=f"run {run_id} to wait for {reason} with {sorted(files)}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_operation_made_on_the_branch_is_not_made_again_on_the_target_after_the_merge(
    tenant, processes, tmp_path: Path
):
    ledger = tmp_path / "notices.txt"
    processes.worker(env=ENV)
    state = {
        "topic": "merge-notice",
        "files": {"plan.md": "# plan\n"},
        "notify": str(ledger),
        "main_edits": {"files": {"main.md": "from main\n"}},
        "branch_edits": {
            "files": {"branch.md": "from the branch\n", "plan.md": "# plan\n- sent the notice\n"}
        },
    }
    parent = run_start(tenant=tenant, workflow_name="test.merge", input=state, actor="t").run
    _waits(parent.run_id, "waiting_for_review", files={"plan.md"})
    at = AgentRun.objects.get(run_id=parent.run_id).state_revision
    child = run_fork(run_id=parent.run_id, at_seq=at, actor="t")
    _waits(child.run_id, "waiting_for_merge", files={"branch.md"})
    assert ledger.read_text().count("notice from") == 1  # the branch sent it
    run_resume(run_id=parent.run_id, actor="t")
    _waits(parent.run_id, "waiting_for_merge", files={"main.md"})

    merge = run_merge(run_id=child.run_id, actor="t")

    assert merge.status == "applied", merge.conflicts
    assert merge.taken == {"branch.md": "theirs", "main.md": "ours", "plan.md": "theirs"}
    assert merge.result_seq is not None
    event = AgentEvent.objects.get(run_id=parent.run_id, seq=merge.result_seq)
    assert event.payload["operations_left_on_source"] == 1
    run_resume(run_id=parent.run_id, actor="t")
    wait_until(
        lambda: AgentRun.objects.get(run_id=parent.run_id).status in ("completed", "failed"),
        timeout=90,
        message="the parent to finish after the merge",
    )
    parent = AgentRun.objects.get(run_id=parent.run_id)
    assert parent.status == "completed" and parent.result is not None, parent.result
    files = {path: bytes.fromhex(body).decode() for path, body in parent.result["files"].items()}
    assert files == {
        "branch.md": "from the branch\n",
        "main.md": "from main\n",
        "plan.md": "# plan\n- sent the notice\n",
    }
    # The notice went out once, from the branch; the operation stays the branch's.
    assert ledger.read_text().count("notice from") == 1
    assert ledger.read_text().strip() == f"notice from {child.run_id}"
    assert list(ToolOperation.objects.values_list("run_id", "status")) == [(child.run_id, "succeeded")]
    assert not AgentEvent.objects.filter(run_id=parent.run_id, event_type__startswith="operation").exists()
