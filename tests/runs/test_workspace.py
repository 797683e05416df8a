"""Workspace snapshots: files written over steps, restored after a SIGKILL take-over, shared by a
fork, deduplicated across runs, reclaimed by the TTL sweep, erased with the subject."""

from __future__ import annotations

import time

import pytest

import tests.runs.workspace_flows  # noqa: F401 - registers test.workspace in this process
from runs.engine import workspace
from runs.engine.forks import run_fork
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import (
    workspace_files_at,
    workspace_reclaim,
    workspace_snapshot_interval,
    workspace_snapshots,
)
from runs.engine.workspace_models import WorkspaceSnapshot
from runs.kernel.models import AgentEvent, AgentRun
from tests.artifacts import blob_bytes, blob_stored, tenant_keys
from tests.processes import wait_until

ENV = {"KEEPER_WORKFLOW_MODULES": "tests.runs.workspace_flows", "KEEPER_WORKSPACE_SNAPSHOT_STEPS": "2"}


def _drive(run_id, *, sliced: bool = False) -> None:
    for _ in range(20):
        result = run_advance(run_id=run_id, sliced=sliced)
        if result.status != "running":
            return


def test_the_interval_follows_the_chapters_cost_model() -> None:
    # N = sqrt(2 C / (p s)): 2*0.5/(0.01*1) = 100 -> 10; cheaper snapshots or likelier crashes -> shorter
    assert workspace_snapshot_interval(snapshot_cost_s=0.5, step_cost_s=1.0, failure_rate=0.01) == 10
    assert workspace_snapshot_interval(snapshot_cost_s=0.005, step_cost_s=1.0, failure_rate=0.01) == 1
    assert workspace_snapshot_interval(snapshot_cost_s=0.5, step_cost_s=1.0, failure_rate=0.0) == 1000
    assert workspace_snapshot_interval(snapshot_cost_s=2.0, step_cost_s=1.0, failure_rate=0.01) == 20


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_writes_after_the_last_snapshot_are_lost_on_a_crash_as_the_chapter_accepts(tenant, processes):
    # N = 100 and one long slice: plan and progress commit but no snapshot is taken before the kill.
    env = {**ENV, "KEEPER_WORKSPACE_SNAPSHOT_STEPS": "100", "KEEPER_SLICE_MS": "60000"}
    worker = processes.worker(env=env)
    run = run_start(
        tenant=tenant, workflow_name="test.workspace", input={"topic": "lost", "sleep_s": 60}, actor="test"
    ).run
    wait_until(
        lambda: AgentRun.objects.filter(
            run_id=run.run_id, next_step="draft", lease_owner__isnull=False
        ).exists(),
        timeout=60,
        message="the worker to enter the draft step",
    )
    assert not WorkspaceSnapshot.objects.filter(run_id=run.run_id).exists()
    time.sleep(0.3)
    processes.kill(worker)
    processes.worker(env=env)
    processes.beat(env=env)
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status in ("suspended", "completed", "failed"),
        timeout=90,
        message="the run to stop after the take-over",
    )
    run.refresh_from_db()
    # The take-over found no snapshot: the draft step saw only its own write, and reading plan.md
    # (written by a step whose commit was never snapshotted) failed: the step errors, not guesses.
    assert AgentEvent.objects.filter(run=run, event_type="resume_verified").exists()
    error = AgentEvent.objects.filter(run=run, event_type="step_error", step_id="draft").first()
    assert error is not None, list(AgentEvent.objects.filter(run=run).values_list("event_type", flat=True))
    assert error.payload["error_type"] == "NotFound" and "plan.md" in error.payload["message"], error.payload


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_after_sigkill_the_take_over_sees_the_files_of_the_last_snapshot(tenant, processes):
    worker = processes.worker(env=ENV)
    run = run_start(
        tenant=tenant, workflow_name="test.workspace", input={"topic": "refunds", "sleep_s": 60}, actor="test"
    ).run
    wait_until(
        lambda: (
            AgentRun.objects.filter(run_id=run.run_id, next_step="draft", lease_owner__isnull=False).exists()
            and WorkspaceSnapshot.objects.filter(run_id=run.run_id).exists()
        ),
        timeout=60,
        message="the worker to snapshot and enter the draft step",
    )
    time.sleep(0.3)
    processes.kill(worker)
    processes.worker(env=ENV)
    processes.beat(env=ENV)
    # The suspend snapshot is written right after the suspension commits: wait for both.
    wait_until(
        lambda: (
            AgentRun.objects.get(run_id=run.run_id).status == "suspended"
            and WorkspaceSnapshot.objects.filter(run_id=run.run_id, reason="suspend").exists()
        ),
        timeout=90,
        message="the run to reach its review after the take-over",
    )
    run.refresh_from_db()
    assert AgentEvent.objects.filter(run=run, event_type="resume_verified").exists()
    # The interval (2 steps) snapshot after `progress` came back; draft.md of the killed attempt did
    # not survive it (it is the second attempt's own write).
    assert run.state["seen_at_draft"] == ["draft.md", "notes/progress.md", "plan.md"]
    seq, files = workspace_files_at(run_id=run.run_id)
    assert sorted(files) == ["notes/progress.md", "plan.md"]
    history = [(s.seq, s.reason, sorted(s.manifest)) for s in workspace_snapshots(run_id=run.run_id)]
    events = list(
        AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", "event_type", "step_id")
    )
    assert blob_bytes(tenant.tenant_id, files["plan.md"]) == b"# plan for refunds\n- revised\n", (
        history,
        events,
    )
    # An interval snapshot (every 2 steps), or a slice's end if the 200 ms slice ran out under load;
    # the last one is the suspension's.
    reasons = [s.reason for s in workspace_snapshots(run_id=run.run_id)]
    assert reasons[-1] == "suspend" and set(reasons[:-1]) <= {"interval", "slice_end"}, reasons


@pytest.mark.django_db(transaction=True)
def test_a_fork_shares_blobs_and_runs_dedupe(tenant):
    first = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "dedupe"}, actor="t").run
    _drive(first.run_id)
    second = run_start(
        tenant=tenant, workflow_name="test.workspace", input={"topic": "dedupe"}, actor="t"
    ).run
    _drive(second.run_id)
    _, a = workspace_files_at(run_id=first.run_id)
    _, b = workspace_files_at(run_id=second.run_id)
    assert a == b and set(a["plan.md"]) == {"digest", "size"}  # one blob for one content, by digest
    last = AgentRun.objects.get(run_id=first.run_id).state_revision
    before = tenant_keys(tenant.tenant_id)
    child = run_fork(run_id=first.run_id, at_seq=last, actor="t", start=False)
    _, c = workspace_files_at(run_id=child.run_id)
    assert c == a  # the parent's manifest at the fork point
    assert tenant_keys(tenant.tenant_id) == before  # no byte copied
    snap = WorkspaceSnapshot.objects.get(run_id=child.run_id)
    assert (snap.seq, snap.reason) == (1, "fork")


@pytest.mark.django_db(transaction=True)
def test_a_resumed_run_continues_with_its_files_and_a_snapshot_per_suspend(tenant):
    run = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "resume"}, actor="t").run
    _drive(run.run_id)
    assert AgentRun.objects.get(run_id=run.run_id).status == "suspended"
    workspace._open.clear()  # another worker process resumes it: nothing in memory, only the snapshot
    run_resume(run_id=run.run_id, actor="t")
    _drive(run.run_id)
    run = AgentRun.objects.get(run_id=run.run_id)
    assert run.status == "completed" and run.result == {"files": ["notes/progress.md", "plan.md"]}


@pytest.mark.django_db(transaction=True)
def test_ttl_reclaims_snapshots_and_the_sweep_only_blobs_no_live_run_names(tenant, settings):
    from core.artifacts.reclaim import artifacts_reclaim

    done = run_start(
        tenant=tenant, workflow_name="test.workspace", input={"topic": "old-only"}, actor="t"
    ).run
    _drive(done.run_id)
    run_resume(run_id=done.run_id, actor="t")
    _drive(done.run_id)
    live = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "live"}, actor="t").run
    _drive(live.run_id)  # suspended: live; shares notes/progress.md with the finished run
    _, old = workspace_files_at(run_id=done.run_id)
    _, kept = workspace_files_at(run_id=live.run_id)
    assert old["notes/progress.md"] == kept["notes/progress.md"]
    settings.KEEPER_WORKSPACE_TTL = 0.0
    AgentRun.objects.filter(run_id=done.run_id).update(
        updated_at=AgentRun.objects.get(run_id=done.run_id).updated_at
    )
    time.sleep(0.05)
    counts = workspace_reclaim()
    assert counts["snapshots"] >= 1
    assert not WorkspaceSnapshot.objects.filter(run_id=done.run_id).exists()
    assert blob_stored(tenant.tenant_id, old["plan.md"])  # the blobs wait for the artifact sweep
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    artifacts_reclaim()
    assert not blob_stored(tenant.tenant_id, old["plan.md"])  # only the finished run named it
    assert blob_stored(tenant.tenant_id, kept["notes/progress.md"])  # the live run still names it
    assert blob_stored(tenant.tenant_id, kept["plan.md"])
    assert WorkspaceSnapshot.objects.filter(run_id=live.run_id).exists()


@pytest.mark.django_db(transaction=True)
def test_erasure_deletes_the_subjects_manifests_and_blobs_and_keeps_shared_ones(tenant):
    from memory.erasure import erasure_execute, erasure_request_create

    mine = run_start(
        tenant=tenant,
        workflow_name="test.workspace",
        input={"topic": "cust-4711 secret"},
        actor="t",
        subject="cust-4711",
    ).run
    _drive(mine.run_id)
    child = run_fork(
        run_id=mine.run_id,
        at_seq=AgentRun.objects.get(run_id=mine.run_id).state_revision,
        actor="t",
        start=False,
    )
    other = run_start(
        tenant=tenant, workflow_name="test.workspace", input={"topic": "x"}, actor="t", subject="cust-9"
    ).run
    _drive(other.run_id)
    _, files = workspace_files_at(run_id=mine.run_id)
    _, shared = workspace_files_at(run_id=other.run_id)
    secret, common = files["plan.md"], shared["notes/progress.md"]
    assert blob_stored(tenant.tenant_id, secret) and files["notes/progress.md"] == shared["notes/progress.md"]
    request = erasure_request_create(tenant=tenant, subject_id="cust-4711", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    places = {p["place"]: p for p in done.receipt["places"]}
    assert places["artifacts.stored"]["before"] >= 1 and places["artifacts.stored"]["after"] == 0
    assert not WorkspaceSnapshot.objects.filter(run_id__in=[mine.run_id, child.run_id]).exists()
    assert not blob_stored(tenant.tenant_id, secret)  # the subject's bytes are gone from the store
    assert blob_stored(tenant.tenant_id, common)  # another subject's run names the same content: kept
    assert WorkspaceSnapshot.objects.filter(run_id=other.run_id).exists()


def test_workspace_bench_prints_the_figures_and_the_interval_and_leaves_nothing(db, capsys, settings) -> None:
    from pathlib import Path

    from django.core.management import call_command

    from core.models import Tenant

    root = Path(settings.KEEPER_ARTIFACT_ROOT)
    files_before = sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
    tenants = Tenant.objects.count()
    call_command("workspace_bench", "--rounds", "50")
    out = capsys.readouterr().out
    assert "snapshot cost C =" in out and "interval N = sqrt(2C/(p*s)) =" in out
    # Measured on a temporary store, removed: not a blob in the live one, nor a record.
    assert (sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []) == files_before
    assert Tenant.objects.count() == tenants
    print(out)


@pytest.mark.django_db(transaction=True)
def test_the_workspace_is_snapshotted_before_a_side_effect(tenant, settings):
    # One slice for both steps and no interval snapshot: only the side effect's can be there.
    settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS, settings.KEEPER_SLICE_MS = 100, 60_000
    run = run_start(tenant=tenant, workflow_name="test.workspace_effect", input={}, actor="t").run
    _drive(run.run_id, sliced=True)
    run = AgentRun.objects.get(run_id=run.run_id)
    assert run.status == "completed", run.suspend_detail
    assert run.result["snapshot"] == ["side_effect", ["report.md"]]


def test_bad_workspace_paths_are_refused_with_a_reason() -> None:
    from core.errors import InvalidInput
    from runs.engine.workspace import workspace_path_clean

    assert workspace_path_clean("notes/./plan.md") == "notes/plan.md"
    for bad in ("", "/etc/passwd", "../up.md", "a/../../b", "x" * 600, "nul\x00"):
        with pytest.raises(InvalidInput) as refused:
            workspace_path_clean(bad)
        assert refused.value.code == "invalid_path"


@pytest.mark.django_db(transaction=True)
def test_another_tenant_sees_no_snapshot_row(tenant, other_tenant):
    from core.tenancy import tenant_scope

    run = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "rls"}, actor="t").run
    _drive(run.run_id)
    assert WorkspaceSnapshot.objects.filter(run_id=run.run_id).exists()
    with tenant_scope(other_tenant.tenant_id):
        assert not WorkspaceSnapshot.objects.filter(run_id=run.run_id).exists()
        assert workspace_files_at(run_id=run.run_id) == (None, {})
