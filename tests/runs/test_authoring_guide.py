"""docs/tutorials/first-workflow.md's python blocks are the guide's whole module: these tests run
them on the real engine (a real worker and beat for the happy path), so the guide cannot drift from
the code."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from runs.engine.approvals import approval_approve, approval_reject
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Approval, ToolOperation
from tests.processes import wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = pytest.mark.django_db(transaction=True)

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "first-workflow.md"
MODULE = "keeper_guide_goodwill"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.S | re.M)


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    """The guide's module, written out and imported here (which registers its workflow); the
    folder is what a worker process needs on its path."""
    path = tmp_path / f"{MODULE}.py"
    path.write_text("\n\n".join(_blocks()))
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return tmp_path


def _state(run: AgentRun, status: str, reason: str = "") -> bool:
    run.refresh_from_db()
    return run.status == status and (run.suspend_reason or "") == reason


def test_the_guides_workflow_fits_in_about_thirty_lines():
    [definition] = [b for b in _blocks() if "workflow(" in b and "@goodwill.step" in b]
    lines = [line for line in definition.splitlines() if line.strip()]
    assert len(lines) <= 35, len(lines)
    for helper in ("ctx.approval(", "ctx.sleep(", "ctx.operation("):
        assert helper in definition


def test_a_rejected_goodwill_refund_completes_without_a_refund(tenant, guide):
    run = run_start(
        tenant=tenant,
        workflow_name="guide.goodwill",
        input={"order_id": "o-g0", "amount_minor": 500},
        actor="t",
    ).run
    run_advance(run_id=run.run_id, worker_id="w-test")
    assert _state(run, "suspended", "approval_required")
    approval_reject(approval_id=Approval.objects.get(run=run).approval_id, actor="user:ana", note="no")
    while run_advance(run_id=run.run_id, worker_id="w-test").outcome == "committed":
        pass
    run.refresh_from_db()
    assert run.status == "completed" and run.result == {"refunded": False, "note": "no"}
    assert not ToolOperation.objects.filter(run=run).exists()


@pytest.mark.slow
def test_the_guides_workflow_approves_sleeps_and_refunds_once_on_a_real_worker(
    tenant, guide, live_server, processes
):
    sandbox = Sandbox(live_server.url + "/sandbox")
    sandbox.order("o-g1")
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(guide), os.environ.get("PYTHONPATH", "")) if p),
        "KEEPER_WORKFLOW_MODULES": MODULE,
        "KEEPER_SANDBOX_URL": sandbox.url,
    }
    processes.worker(pool="solo", env=env)
    processes.beat(env)
    data = {"order_id": "o-g1", "amount_minor": 500, "cool_off_s": 2}
    run = run_start(tenant=tenant, workflow_name="guide.goodwill", input=data, actor="t").run
    wait_until(lambda: _state(run, "suspended", "approval_required"), timeout=60, message="the approval")
    approval_approve(approval_id=Approval.objects.get(run=run).approval_id, actor="user:ana")
    wait_until(lambda: _state(run, "completed"), timeout=90, message="the run to complete")
    [refund] = sandbox.ledger("o-g1")
    assert run.result == {"refunded": True, "refund_id": refund["refund_id"]}
    reasons = list(
        AgentEvent.objects.filter(run=run, event_type="run_suspended").values_list(
            "payload__reason", flat=True
        )
    )
    assert reasons == ["approval_required", "timer"]
    woken = AgentEvent.objects.filter(run=run, event_type="resume_verified", payload__requested_by="timer")
    assert woken.count() == 1
    op = ToolOperation.objects.get(run=run)
    assert (op.operation_id, op.status, op.external_ref) == (
        "goodwill:o-g1",
        "succeeded",
        refund["refund_id"],
    )


@pytest.mark.slow
# after_operation_request_sent fires only where the call says when its request left (`call.sent()`,
# as the refund's payments client does); the guide's urllib helper cannot tell.
@pytest.mark.parametrize("point", ["before_operation_call", "after_operation_response"])
def test_a_worker_killed_inside_the_guides_operation_leaves_one_refund_and_a_completed_run(
    tenant, guide, live_server, processes, tmp_path: Path, point: str
):
    sandbox = Sandbox(live_server.url + "/sandbox")
    sandbox.order("o-g2")
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(guide), os.environ.get("PYTHONPATH", "")) if p),
        "KEEPER_WORKFLOW_MODULES": MODULE,
        "KEEPER_SANDBOX_URL": sandbox.url,
        "KEEPER_CRASH_AT": point,
        "KEEPER_CRASH_ONCE_DIR": str(tmp_path),
    }
    worker = processes.worker(pool="solo", env=env)
    processes.beat(env)
    data = {"order_id": "o-g2", "amount_minor": 500, "cool_off_s": 0}
    run = run_start(tenant=tenant, workflow_name="guide.goodwill", input=data, actor="t").run
    wait_until(lambda: _state(run, "suspended", "approval_required"), timeout=60, message="the approval")
    approval_approve(approval_id=Approval.objects.get(run=run).approval_id, actor="user:ana")
    wait_until(lambda: worker.poll() is not None, timeout=60, message=f"the worker to die at {point}")
    assert worker.returncode == 137 and (tmp_path / f"{point}--{run.run_id}").exists()
    processes.worker(pool="solo", env=env)
    wait_until(lambda: _state(run, "completed"), timeout=90, message="the run to complete after the crash")
    [refund] = sandbox.ledger("o-g2")
    assert run.result == {"refunded": True, "refund_id": refund["refund_id"]}
    op = ToolOperation.objects.get(run=run)
    assert (op.status, op.external_ref) == ("succeeded", refund["refund_id"])
    takeover = AgentEvent.objects.get(
        run=run, event_type="resume_verified", payload__trigger="lease_takeover"
    )
    assert takeover.payload["step"] == "pay"
