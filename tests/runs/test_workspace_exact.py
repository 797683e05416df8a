"""A workspace is exact at every seq its snapshots cover (a fork between two snapshots sees its fork
point's files), and a run resumed on another host finds its files and stored blobs by digest."""

from __future__ import annotations

import shutil

import pytest

import tests.runs.workspace_flows  # noqa: F401 - registers the test workflows in this process
from core.artifacts import artifact_get
from runs.engine import workspace
from runs.engine.forks import run_fork, run_rewind
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import workspace_files_at, workspace_snapshots
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until
from tests.s3 import S3, s3, s3_server  # noqa: F401 - the fixtures

ENV = {"KEEPER_WORKFLOW_MODULES": "tests.runs.workspace_flows"}


def _drive(run_id) -> AgentRun:
    for _ in range(20):
        if run_advance(run_id=run_id, sliced=True).status != "running":
            break
    return AgentRun.objects.get(run_id=run_id)


def _seq_after(run: AgentRun, step: str) -> int:
    return AgentEvent.objects.get(run=run, event_type="step_completed", step_id=step).seq


@pytest.mark.django_db(transaction=True)
def test_a_fork_between_snapshots_sees_exactly_the_files_of_its_fork_point(tenant, settings):
    # One slice, a snapshot every 100 steps: the only snapshot is the suspension's, after `draft`.
    settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS, settings.KEEPER_SLICE_MS = 100, 60_000
    parent = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "forks"}, actor="t").run
    parent = _drive(parent.run_id)
    assert parent.status == "suspended"
    assert [s.reason for s in workspace_snapshots(run_id=parent.run_id)] == ["suspend"]
    after_plan, after_progress = _seq_after(parent, "plan"), _seq_after(parent, "progress")

    seq, files = workspace_files_at(run_id=parent.run_id, seq=after_plan)
    assert (seq, sorted(files)) == (after_plan, ["plan.md"])
    assert artifact_get(tenant_id=tenant.tenant_id, ref=files["plan.md"]) == b"# plan for forks\n"
    _, files = workspace_files_at(run_id=parent.run_id, seq=after_progress)
    assert sorted(files) == ["notes/progress.md", "plan.md"]

    child = run_fork(run_id=parent.run_id, at_seq=after_plan, actor="t")
    _, theirs = workspace_files_at(run_id=child.run_id)
    assert sorted(theirs) == ["plan.md"]  # not the revised plan, not progress.md
    workspace._open.clear()  # another worker runs the fork: only what was saved counts
    child = _drive(child.run_id)
    assert child.status == "suspended", child.suspend_detail  # its draft step read plan.md
    assert not AgentEvent.objects.filter(run=child, event_type="step_error").exists()
    assert child.state["seen_at_draft"] == ["draft.md", "notes/progress.md", "plan.md"]
    _, done = workspace_files_at(run_id=child.run_id)
    assert artifact_get(tenant_id=tenant.tenant_id, ref=done["plan.md"]) == b"# plan for forks\n- revised\n"

    # A rewind is a fork that supersedes: the same files.
    rewound = run_rewind(run_id=parent.run_id, to_seq=after_progress, actor="t").run
    _, files = workspace_files_at(run_id=rewound.run_id)
    assert sorted(files) == ["notes/progress.md", "plan.md"]


@pytest.mark.django_db(transaction=True)
def test_a_resume_where_the_store_is_mounted_elsewhere_finds_its_files_and_blobs(tenant, settings, tmp_path):
    run = run_start(
        tenant=tenant, workflow_name="test.workspace_reread", input={"topic": "moved"}, actor="t"
    ).run
    assert _drive(run.run_id).status == "suspended"
    # Another host: the same volume under another path (references name digests, not paths).
    moved = tmp_path / "elsewhere"
    shutil.move(str(settings.KEEPER_ARTIFACT_ROOT), moved)
    settings.KEEPER_ARTIFACT_ROOT = moved
    settings.BACKENDS = {
        **settings.BACKENDS,
        "artifact_store": {
            "BACKEND": "core.artifacts.local.LocalArtifactStore",
            "OPTIONS": {"root": str(moved)},
        },
    }
    workspace._open.clear()
    run_resume(run_id=run.run_id, actor="t")
    run = _drive(run.run_id)
    assert run.status == "completed", run.suspend_detail
    assert run.result == {"plan": "# plan for moved\n", "report": "report on moved"}
    verified = AgentEvent.objects.filter(run=run, event_type="resume_verified").latest("seq")
    check = next(c for c in verified.payload["checks"] if c["name"] == "artifacts_and_contracts")
    assert check["detail"].startswith("1 artifact(s)"), check  # the state's report, read back


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_suspended_on_one_host_resumes_on_another_through_the_bucket(
    tenant,
    s3: S3,  # noqa: F811
    processes,
    tmp_path,
):
    # Host A (this process) runs it to its suspension; every blob goes to the bucket.
    run = run_start(
        tenant=tenant, workflow_name="test.workspace_reread", input={"topic": "s3"}, actor="t"
    ).run
    assert _drive(run.run_id).status == "suspended"
    assert s3.object_keys() and all(k.startswith(f"{tenant.tenant_id}/") for k in s3.object_keys())
    # Host B: a worker process with a local folder of its own and nothing of A's disk.
    processes.worker(env={**ENV, **s3.env(), "KEEPER_ARTIFACT_ROOT": str(tmp_path / "host-b")})
    run_resume(run_id=run.run_id, actor="t")
    wait_until(
        lambda: (
            AgentRun.objects.get(run_id=run.run_id).status in ("completed", "failed")
            or AgentEvent.objects.filter(run=run, event_type__in=["resume_refused", "step_error"]).exists()
        ),
        timeout=90,
        message="host B to finish the run",
    )
    run.refresh_from_db()
    assert run.status == "completed", run.suspend_detail
    assert run.result == {"plan": "# plan for s3\n", "report": "report on s3"}
    assert not (tmp_path / "host-b").exists() or not any((tmp_path / "host-b").rglob("*"))


@pytest.mark.django_db(transaction=True)
def test_a_fork_past_the_last_snapshot_of_a_run_mid_slice_waits_for_the_slice(tenant, settings):
    from core.errors import Conflict
    from runs.conversations.messages import conversation_append
    from runs.kernel import apply
    from runs.kernel import moves as m

    settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS, settings.KEEPER_SLICE_STEPS = 100, 2
    run = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "busy"}, actor="t").run
    assert run_advance(run_id=run.run_id, sliced=True).status == "running"  # plan, progress; slice end
    saved = workspace_snapshots(run_id=run.run_id)[-1].seq
    conversation_append(  # an event after the last snapshot
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m1",
        body={"content": "still there?"},
        actor="t",
    )
    head = AgentRun.objects.get(run_id=run.run_id).state_revision
    assert head > saved
    # A worker holds the run (in the middle of a slice): its newer writes may not be saved yet.
    assert apply(m.LeaseTaken(run.run_id, run.tenant_id, "w-busy", 60)) is not None
    with pytest.raises(Conflict) as refused:
        run_fork(run_id=run.run_id, at_seq=head, actor="t", start=False)
    assert refused.value.code == "workspace_not_saved" and refused.value.details == {"saved_seq": saved}
    assert not AgentRun.objects.filter(parent_run_id=run.run_id).exists()  # nothing half-made
    child = run_fork(run_id=run.run_id, at_seq=saved, actor="t", start=False)  # saved: exact
    assert sorted(workspace_files_at(run_id=child.run_id)[1]) == ["notes/progress.md", "plan.md"]
