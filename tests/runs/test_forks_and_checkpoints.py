"""Stored old checkpoints migrate and finish; forks and rewinds replay without paying twice."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from core.digests import canonical_json
from runs import store
from runs.models import AgentEvent, AgentRun, Approval, ToolOperation
from runs.services.approvals import approval_approve
from runs.services.forks import forks_expire, run_fork, run_rewind
from runs.services.runs import run_start
from runs.services.state import state_encode
from runs.services.steps import run_advance
from tests.runs.test_refund_workflow import Sandbox

pytestmark = pytest.mark.django_db(transaction=True)
FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"


@pytest.fixture
def sandbox(live_server, settings) -> Sandbox:  # type: ignore[no-untyped-def]
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_RETRY_BACKOFF = 0
    return Sandbox(settings.KEEPER_SANDBOX_URL)


def _drive(run_id: uuid.UUID, *, approve: bool = True, limit: int = 30) -> AgentRun:
    """Advance until the run settles; approve pending approvals like a person would."""
    for _ in range(limit):
        result = run_advance(run_id=run_id, worker_id="w")
        if result.outcome != "committed" or result.status not in ("running", "retrying"):
            pending = Approval.objects.filter(run_id=run_id, status="pending").first()
            if approve and pending is not None:
                approval_approve(approval_id=pending.approval_id, actor="user:sam", note="checked")
                continue
            if result.outcome != "committed":
                break
    return AgentRun.objects.get(run_id=run_id)


def _insert_checkpoint(tenant, checkpoint: dict) -> uuid.UUID:  # type: ignore[no-untyped-def]
    """Store an old checkpoint the way an older deployment would have left it."""
    run_id, encoded = uuid.uuid4(), state_encode(checkpoint["state"])
    store.insert_run(
        run_id=run_id, tenant_id=tenant.tenant_id, workflow_name="refund", workflow_version="1",
        state_schema_version=checkpoint["state_schema_version"], next_step=checkpoint["next_step"],
        state_json=encoded.json, state_digest=encoded.digest, idempotency_key=None, input_digest="sha256:old",
        payload_json=canonical_json({"restored_from": "fixture"}), actor="test",
    )  # fmt: skip
    return run_id


def _order_for(sandbox: Sandbox, state: dict) -> None:
    order = state.get("order")
    if order is None:
        sandbox.order(state["order_id"])
        return
    amount = order.get("amount_minor") or int(
        round(float(order["amount"]) * (1 if order["currency"] == "JPY" else 100))
    )
    sandbox.order(order["order_id"], amount_minor=amount, currency=order["currency"])


@pytest.mark.parametrize(
    "name", ["refund_v1_approve_pending", "refund_v1_refund_eur", "refund_v2_decide", "refund_v3_approve"]
)
def test_an_old_checkpoint_migrates_to_the_current_schema_and_the_run_completes(
    tenant, sandbox, settings, name
):
    settings.KEEPER_REFUND_WINDOW_DAYS = 100_000  # the fixtures were delivered long ago
    checkpoint = json.loads((FIXTURES / f"{name}.json").read_text())
    _order_for(sandbox, checkpoint["state"])
    run = _drive(_insert_checkpoint(tenant, checkpoint))
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail)
    assert run.state_schema_version == 3
    migrations = list(AgentEvent.objects.filter(run=run, event_type="state_migrated").order_by("seq"))
    assert [(m.payload["from_version"], m.payload["to_version"]) for m in migrations] == [
        (v, v + 1) for v in range(checkpoint["state_schema_version"], 3)
    ]
    first = AgentEvent.objects.get(run=run, seq=1)
    assert first.state == checkpoint["state"]  # the pre-migration state stays recoverable
    assert len(sandbox.ledger(checkpoint["state"]["order_id"])) == 1


def test_an_unknown_checkpoint_version_is_blocked_with_a_reason(tenant, sandbox):
    checkpoint = json.loads((FIXTURES / "refund_v0_unknown.json").read_text())
    run = _drive(_insert_checkpoint(tenant, checkpoint))
    assert (run.status, run.suspend_reason) == ("suspended", "unsupported_checkpoint")
    assert not ToolOperation.objects.filter(run=run).exists()


def test_a_fork_at_every_step_of_a_completed_refund_replays_without_a_second_refund(
    tenant, sandbox, settings
):
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-fork")
    parent = _drive(
        run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-fork"}, actor="t").run.run_id
    )
    assert parent.status == "completed"
    forkable = AgentEvent.objects.filter(run=parent, next_step__isnull=False).values_list("seq", flat=True)
    assert len(forkable) >= 5
    for seq in forkable:
        child = run_fork(run_id=parent.run_id, at_seq=seq, actor="user:eng")
        assert (child.parent_run_id, child.fork_seq) == (parent.run_id, seq)
        assert state_encode(child.state).digest == AgentEvent.objects.get(run=parent, seq=seq).state_digest
        child = _drive(child.run_id)
        assert child.status == "completed", (seq, child.suspend_reason, child.suspend_detail)
        assert child.result["refund_id"] == parent.result["refund_id"]
    assert len(sandbox.ledger("o-fork")) == 1
    assert ToolOperation.objects.count() == 1


def test_rewind_supersedes_the_original_which_is_kept(tenant, sandbox, settings):
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-rw")
    run = _drive(
        run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-rw"}, actor="t").run.run_id
    )
    child = run_rewind(run_id=run.run_id, to_seq=2, actor="user:eng", note="re-decide")
    run.refresh_from_db()
    assert run.superseded_by_id == child.run_id and run.status == "completed"
    assert AgentEvent.objects.filter(run=run, event_type="run_superseded").count() == 1
    assert _drive(child.run_id).status == "completed" and len(sandbox.ledger("o-rw")) == 1


def test_a_fork_that_nobody_starts_expires(tenant, settings):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    settings.KEEPER_FORK_TTL = 1
    child = run_fork(run_id=run.run_id, at_seq=1, actor="user:eng", start=False)
    assert (child.status, child.suspend_reason) == ("suspended", "fork_not_started")
    AgentRun.objects.filter(pk=child.pk).update(fork_expires_at=child.fork_expires_at.replace(year=2000))
    assert forks_expire() == 1
    child.refresh_from_db()
    assert child.status == "cancelled"


def test_forking_a_tampered_history_is_refused(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    run_advance(run_id=run.run_id, worker_id="w")
    AgentEvent.objects.filter(run=run, seq=2).update(state={"n": 99})
    from runs.services.forks import ForkStateMismatch

    with pytest.raises(ForkStateMismatch):
        run_fork(run_id=run.run_id, at_seq=2, actor="user:eng")
