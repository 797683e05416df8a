"""The engine with real processes: Celery workers and beat, SIGKILL, a flushed Redis, many runs."""

from __future__ import annotations

import time

import pytest
from django.db.models import Count, Max

from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import flush_redis, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _statuses(run_ids) -> dict[str, int]:
    rows = AgentRun.objects.filter(run_id__in=run_ids).values_list("status").annotate(n=Count("run_id"))
    return dict(rows)


def _assert_history_is_whole(run: AgentRun) -> None:
    seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1)), f"gap or duplicate in {run.run_id}: {seqs}"


def test_separate_processes_racing_on_one_revision_exactly_one_commits(tenant, processes):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="shared",
            ttl=60,
        )
    )
    go_at = time.time() + 3.0
    popens = [
        processes.script(
            [
                "-m",
                "tests.runs.engine.race_commit",
                str(run.run_id),
                str(grant.revision),
                str(grant.epoch),
                "shared",
                str(go_at),
                f"racer{i}",
            ]
        )
        for i in range(4)
    ]
    for proc in popens:
        assert proc.wait(timeout=60) == 0
    outputs = processes.logs()
    assert outputs.count("committed 2") == 1 and outputs.count("fenced") == 3, outputs
    run.refresh_from_db()
    assert run.state_revision == 2 == AgentEvent.objects.filter(run=run).count()


def test_a_worker_killed_mid_step_is_taken_over_and_the_run_resumes_at_that_step(tenant, processes):
    _killed_mid_step_and_taken_over(tenant, processes)


def test_through_pgbouncer_a_worker_killed_mid_step_is_taken_over_at_that_step(
    through_pgbouncer, tenant, processes
):
    """Workers, beat and this test through PgBouncer in transaction mode (tests.pooling)."""
    _killed_mid_step_and_taken_over(tenant, processes)


def _killed_mid_step_and_taken_over(tenant, processes) -> None:
    worker = processes.worker()
    run = run_start(tenant=tenant, workflow_name="test.slow", input={"sleep_s": 60}, actor="test").run
    wait_until(
        lambda: AgentRun.objects.filter(
            run_id=run.run_id, next_step="slow", lease_owner__isnull=False
        ).exists(),
        timeout=30,
        message="the worker to enter the slow step",
    )
    time.sleep(0.3)
    processes.kill(worker)  # SIGKILL to the whole process group, mid-step
    killed_at = time.monotonic()
    processes.worker()
    processes.beat()
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status == "completed",
        timeout=60,
        message="the run to complete after the crash",
    )
    recovery = time.monotonic() - killed_at
    run.refresh_from_db()
    _assert_history_is_whole(run)
    events = list(
        AgentEvent.objects.filter(run=run).order_by("seq").values_list("event_type", "step_id", "attempt")
    )
    assert events == [
        ("run_started", None, None),
        ("step_completed", "begin", 1),
        ("resume_verified", None, 2),
        ("step_completed", "slow", 2),
        ("run_completed", "done", 1),
    ]
    assert run.state["slow_attempts"] == 2
    takeover = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert takeover.payload["trigger"] == "lease_takeover" and takeover.payload["step"] == "slow"
    assert [c["name"] for c in takeover.payload["checks"]] == [
        "lease_and_revision",
        "tenant_workflow_schema",
        "artifacts_and_contracts",
        "event_log",
        "operations",
        "approvals",
        "budgets",
    ]
    # begin and slow ran in one slice under the first lease; the take-over is the second
    assert (takeover.payload["previous_epoch"], takeover.payload["epoch"]) == (1, 2)
    assert takeover.actor != takeover.payload["previous_owner"]
    print(f"recovered {recovery:.2f}s after SIGKILL")


def test_a_long_step_keeps_its_lease_by_heartbeat(tenant, processes):
    processes.worker()
    run = run_start(tenant=tenant, workflow_name="test.long_step", input={"sleep_s": 5}, actor="test").run
    wait_until(
        lambda: AgentRun.objects.filter(run_id=run.run_id, lease_owner__isnull=False).exists(),
        timeout=30,
        message="the worker to take the run",
    )
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:  # 2 lease TTLs: without renewals another owner would get in
        assert (
            apply(
                m.LeaseTaken(
                    run_id=run.run_id,
                    tenant_id=run.tenant_id,
                    owner="thief",
                    ttl=30,
                )
            )
            is None
        )
        time.sleep(0.2)
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status == "completed",
        timeout=30,
        message="the long step to finish",
    )
    run.refresh_from_db()
    assert run.state["lease_lost"] is False
    assert not AgentEvent.objects.filter(run=run, event_type="resume_verified").exists()


def test_lost_wake_ups_are_recovered_by_the_beat_sweep(tenant, processes):
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 5}, actor="test").run
        for _ in range(20)
    ]
    ids = [r.run_id for r in runs]
    flush_redis()  # every queued wake-up is gone
    processes.worker(concurrency=2)
    time.sleep(3)
    assert AgentRun.objects.filter(run_id__in=ids, state_revision=1).count() == 20  # nothing woke them
    processes.beat()
    wait_until(lambda: _statuses(ids) == {"completed": 20}, timeout=60, message="all runs to complete")
    for run in AgentRun.objects.filter(run_id__in=ids):
        _assert_history_is_whole(run)


def test_redis_flushed_mid_run_every_run_still_completes(tenant, processes):
    processes.worker(concurrency=2)
    processes.beat()
    ids = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 30}, actor="test").run.run_id
        for _ in range(10)
    ]
    wait_until(
        lambda: AgentRun.objects.filter(run_id__in=ids, state_revision__gte=5).exists(),
        timeout=30,
        message="some progress",
    )
    for _ in range(3):
        flush_redis()
        time.sleep(0.3)
    wait_until(lambda: _statuses(ids) == {"completed": 10}, timeout=90, message="all runs to complete")
    for run in AgentRun.objects.filter(run_id__in=ids):
        _assert_history_is_whole(run)
        assert run.state_revision == 33  # run_started, start, 30 ticks, finish


def test_two_hundred_runs_through_real_workers_all_complete(tenant, processes):
    processes.worker(concurrency=2)
    processes.worker(concurrency=2)
    processes.beat()
    ids = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run.run_id
        for _ in range(200)
    ]
    wait_until(
        lambda: _statuses(ids) == {"completed": 200},
        timeout=240,
        interval=0.5,
        message="200 runs to complete",
    )
    per_run = dict(
        AgentEvent.objects.filter(run_id__in=ids)
        .values_list("run_id")
        .annotate(n=Count("id"), top=Max("seq"))
        .values_list("run_id", "n")
    )
    for run in AgentRun.objects.filter(run_id__in=ids):
        assert run.state_revision == per_run[run.run_id] == 6
        _assert_history_is_whole(run)
        assert run.result == {"counted": 3}
