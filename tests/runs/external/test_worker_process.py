"""A real outside worker process (the Python client) against Keeper's live web server and the sandbox:
SIGKILL at each point of the operation protocol, take-over by a second worker, one refund, no lost run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.api_auth import api_key_create
from core.processes import ROOT
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.processes import wait_until
from tests.runs.external.conftest import REFUND
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENT_PATH = str(ROOT / "clients" / "python")


def _keeper(live_server, tenant, settings):
    from keeper_client import KeeperClient

    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"  # resume verification's lookup
    key = api_key_create(tenant=tenant, name="outside", scope="write").plaintext
    client = KeeperClient(live_server.url, key)
    client.register_workflow(
        REFUND["name"],
        REFUND["version"],
        REFUND["steps"],
        tools=REFUND["tools"],
        input_schema=REFUND["input_schema"],
    )
    env = {
        "KEEPER_URL": live_server.url,
        "KEEPER_API_KEY": key,
        "SANDBOX_URL": settings.KEEPER_SANDBOX_URL,
        "PYTHONPATH": os.pathsep.join([CLIENT_PATH, str(ROOT)]),
        "LEASE_TTL": "2",
    }
    return client, env


def _settled(run_id: str) -> bool:
    run = AgentRun.objects.get(run_id=run_id)
    return run.status != "running" and not (run.status == "suspended" and run.resume_requested_at)


@pytest.mark.parametrize(
    ("point", "takeover"),
    [
        ("before_call", True),
        ("after_request_sent", True),
        ("after_response", True),
        ("after_commit", False),
    ],
)
def test_a_killed_outside_worker_is_taken_over_with_one_refund(
    live_server, tenant, settings, processes, tmp_path: Path, point: str, takeover: bool
):
    client, env = _keeper(live_server, tenant, settings)
    sandbox = Sandbox(settings.KEEPER_SANDBOX_URL)
    sandbox.order("o-ext")
    run_id = client.start_run("ext.refund", {"order_id": "o-ext"})["run_id"]
    crash_env = {
        **env,
        "KEEPER_CLIENT_CRASH_AT": point,
        "KEEPER_CLIENT_CRASH_ONCE_DIR": str(tmp_path),
        "WORKER_ID": "first",
    }
    first = processes.script(["-m", "tests.runs.external.refund_worker"], crash_env)
    wait_until(lambda: first.poll() is not None, timeout=90, message=f"the worker to die at {point}")
    assert first.returncode == -9, processes.logs()
    assert (tmp_path / point).exists()
    processes.script(["-m", "tests.runs.external.refund_worker"], {**crash_env, "WORKER_ID": "second"})
    wait_until(lambda: _settled(run_id), timeout=90, message="the run to settle after the kill")
    run = AgentRun.objects.get(run_id=run_id)
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail, processes.logs())
    [refund] = sandbox.ledger("o-ext")  # 0 double refunds
    assert run.result == {"refund_id": refund["refund_id"]}
    op = ToolOperation.objects.get(run=run)
    assert (op.status, op.external_ref) == ("succeeded", refund["refund_id"])
    steps = list(
        AgentEvent.objects.filter(run=run, event_type="step_completed").values_list("step_id", flat=True)
    )
    assert steps == ["lookup", "refund"]  # no step committed twice
    takeovers = AgentEvent.objects.filter(
        run=run, event_type="resume_verified", payload__trigger="lease_takeover"
    )
    assert takeovers.exists() == takeover
    seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1))


def test_two_worker_processes_share_many_runs_and_never_both_commit(live_server, tenant, settings, processes):
    client, env = _keeper(live_server, tenant, settings)
    sandbox = Sandbox(settings.KEEPER_SANDBOX_URL)
    run_ids = []
    for i in range(6):
        sandbox.order(f"o-race-{i}")
        run_ids.append(client.start_run("ext.refund", {"order_id": f"o-race-{i}"})["run_id"])
    # Keeper's own Celery worker and beat (whose sweep re-sends wake-ups) run too: they must leave these runs alone.
    processes.worker(pool="solo", env={"KEEPER_REDISPATCH_GRACE": "1"})
    processes.beat({"KEEPER_REDISPATCH_GRACE": "1"})
    for name in ("a", "b"):
        processes.script(["-m", "tests.runs.external.refund_worker"], {**env, "WORKER_ID": name})
    wait_until(lambda: all(_settled(r) for r in run_ids), timeout=120, message="every run to settle")
    for i, run_id in enumerate(run_ids):
        run = AgentRun.objects.get(run_id=run_id)
        assert run.status == "completed", (run.suspend_reason, run.suspend_detail)
        assert len(sandbox.ledger(f"o-race-{i}")) == 1
        steps = list(
            AgentEvent.objects.filter(run=run, event_type="step_completed").values_list("step_id", flat=True)
        )
        assert steps == ["lookup", "refund"]
    actors = set(
        AgentEvent.objects.filter(run_id__in=run_ids, event_type="step_completed").values_list(
            "actor", flat=True
        )
    )
    assert all(a.startswith("external:kp_") for a in actors) and {a.split(":")[2] for a in actors} <= {
        "a",
        "b",
    }
    leases = AgentEvent.objects.filter(run_id__in=run_ids).exclude(actor__startswith="external:")
    assert set(leases.values_list("event_type", flat=True)) == {"run_started"}  # nothing else wrote
