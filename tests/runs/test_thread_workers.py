"""A worker whose pool is threads (KEEPER_WORKER_POOL=threads): many runs at once in one process, each
step committed once, a SIGKILL losing nothing, and a step past the task time limit letting its lease go."""

from __future__ import annotations

import time

import pytest

from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = {"KEEPER_WORKER_POOL": "threads"}


def _countdowns(tenant, count: int, n: int) -> list:
    return [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test").run.run_id
        for _ in range(count)
    ]


def _completed(ids) -> int:
    return AgentRun.objects.filter(run_id__in=ids, status="completed").count()


def _assert_whole(ids, n: int) -> None:
    for run in AgentRun.objects.filter(run_id__in=ids):
        seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, run.state_revision + 1)), f"gap or duplicate in {run.run_id}"
        steps = list(
            AgentEvent.objects.filter(run=run, event_type="step_completed").values_list("step_id", flat=True)
        )
        assert steps.count("tick") == n and run.result == {"counted": n}


def test_one_threads_worker_runs_many_runs_at_once_and_commits_each_step_once(tenant, processes):
    # The pool comes from the settings, as `make run` starts its worker: no -P on the command line.
    processes.script(
        ["-m", "celery", "-A", "workers", "worker", "-l", "warning", "-n", "threads@%h"],
        env={**THREADS, "KEEPER_WORKER_CONCURRENCY": "8"},
    )
    ids = _countdowns(tenant, 60, 5)
    wait_until(lambda: _completed(ids) == 60, timeout=120, interval=0.2, message="60 runs to complete")
    _assert_whole(ids, 5)
    # One process, several of its threads held leases: each thread is its own lease owner.
    owners = set(
        AgentEvent.objects.filter(run_id__in=ids, event_type="step_completed").values_list("actor", flat=True)
    )
    assert len({owner.split(":")[1] for owner in owners}) == 1, owners  # one pid
    assert len(owners) > 1, owners


def test_a_threads_worker_killed_mid_flight_loses_no_run_and_repeats_no_step(tenant, processes):
    worker = processes.worker(pool="threads", concurrency=8, env=THREADS)
    ids = _countdowns(tenant, 30, 60)
    wait_until(
        lambda: AgentRun.objects.filter(run_id__in=ids, state_revision__gte=5).count() >= 5,
        timeout=60,
        message="some runs under way",
    )
    processes.kill(worker)  # SIGKILL: every thread's run loses its holder at once
    assert _completed(ids) < 30
    processes.worker(pool="threads", concurrency=8, env=THREADS)
    processes.beat()
    wait_until(lambda: _completed(ids) == 30, timeout=180, interval=0.3, message="every run to complete")
    _assert_whole(ids, 60)
    # the killed worker's runs were taken over, each verified before it went on
    assert AgentEvent.objects.filter(run_id__in=ids, event_type="resume_verified").exists()


def test_a_step_past_the_task_time_limit_lets_its_lease_go_in_a_threads_worker(tenant, processes):
    """A thread cannot be killed as a prefork child past KEEPER_TASK_TIME_LIMIT is: the heartbeat stops
    renewing its lease, another worker may take the run over, and the late commit is fenced."""
    processes.worker(pool="threads", concurrency=2, env={**THREADS, "KEEPER_TASK_TIME_LIMIT": "2"})
    run = run_start(tenant=tenant, workflow_name="test.long_step", input={"sleep_s": 9}, actor="test").run
    wait_until(
        lambda: AgentRun.objects.filter(run_id=run.run_id, lease_owner__isnull=False).exists(),
        timeout=30,
        message="the worker to take the run",
    )
    taken = None
    deadline = time.monotonic() + 7  # 2 s of limit, then one 2 s lease TTL, with room to spare
    while taken is None and time.monotonic() < deadline:
        taken = apply(
            m.LeaseTaken(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner="rescuer",
                ttl=30,
            )
        )
        time.sleep(0.2)
    assert taken is not None, "the lease was still renewed past the task time limit"
    time.sleep(4)  # the long step ends now; its commit must not land on the rescuer's epoch
    run.refresh_from_db()
    assert run.status != "completed" and run.lease_owner == "rescuer"
    assert not AgentEvent.objects.filter(run=run, event_type="run_completed").exists()
    assert "past KEEPER_TASK_TIME_LIMIT=2" in processes.logs()
