"""Stored old checkpoints migrate and finish; forks and rewinds replay without paying twice."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from core.digests import canonical_json
from runs.engine.approvals import approval_approve
from runs.engine.forks import forks_expire, run_fork, run_rewind
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, ToolOperation
from runs.kernel.state import state_encode
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = pytest.mark.django_db(transaction=True)
FIXTURES = Path(__file__).parent.parent / "fixtures" / "checkpoints"


@pytest.fixture
def sandbox(live_server, settings) -> Sandbox:
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


def _insert_checkpoint(tenant, checkpoint: dict) -> uuid.UUID:
    """Store an old checkpoint the way an older deployment would have left it."""
    run_id, encoded = uuid.uuid4(), state_encode(checkpoint["state"])
    apply(
        m.RunStarted(
            run_id=run_id,
            tenant_id=tenant.tenant_id,
            workflow_name="refund",
            workflow_version="1",
            state_schema_version=checkpoint["state_schema_version"],
            next_step=checkpoint["next_step"],
            state=encoded,
            idempotency_key=None,
            input_digest="sha256:old",
            payload={"restored_from": "fixture"},
            actor="test",
        )
    )
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
    child = run_rewind(run_id=run.run_id, to_seq=2, actor="user:eng", note="re-decide").run
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


def test_an_expired_fork_whose_start_was_asked_for_is_not_cancelled(tenant, settings):
    from runs.engine.runs import run_resume

    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    settings.KEEPER_FORK_TTL = 1
    started, idle = (run_fork(run_id=run.run_id, at_seq=1, actor="user:eng", start=False) for _ in range(2))
    AgentRun.objects.filter(pk__in=[started.pk, idle.pk]).update(
        fork_expires_at=started.fork_expires_at.replace(year=2000)
    )
    run_resume(run_id=started.run_id, actor="user:eng", note="start it")  # asked to start, not yet taken
    assert forks_expire() == 1
    started.refresh_from_db()
    idle.refresh_from_db()
    assert (idle.status, started.status, started.resume_requested_by) == (
        "cancelled",
        "suspended",
        "user:eng",
    )
    assert not AgentEvent.objects.filter(run=started, event_type="fork_expired").exists()
    assert run_advance(run_id=started.run_id, worker_id="w").outcome == "committed"  # it starts


def test_forking_a_tampered_history_is_refused(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    run_advance(run_id=run.run_id, worker_id="w")
    AgentEvent.objects.filter(run=run, seq=2).update(state={"n": 99})
    from runs.engine.forks import ForkStateMismatch

    with pytest.raises(ForkStateMismatch):
        run_fork(run_id=run.run_id, at_seq=2, actor="user:eng")


def _chat_parent(tenant) -> AgentRun:
    """A conversation with two answered turns and a third message not answered yet."""
    run = run_start(
        tenant=tenant,
        workflow_name="conversation",
        input={"system_prompt": "Be brief."},
        actor="t",
        subject="cust-9",
    ).run
    _say(tenant, run.run_id, "m-1", "Refund 25.00 EUR please. Never call me by phone.")
    _drive(run.run_id, approve=False)
    _say(tenant, run.run_id, "m-2", "Order ord-1.")
    _drive(run.run_id, approve=False)
    _say(tenant, run.run_id, "m-3", "Are you there?")
    return AgentRun.objects.get(run_id=run.run_id)


def _say(tenant, run_id: uuid.UUID, cmid: str, text: str) -> AgentEvent:
    from runs.conversations.messages import conversation_append

    return conversation_append(
        tenant=tenant,
        run_id=run_id,
        event_type="user_message",
        client_message_id=cmid,
        body={"content": text},
        actor="user:cust-9",
    ).event


def _assert_carries_and_answers(tenant, parent: AgentRun, child: AgentRun, seq: int) -> None:
    said = [
        (e.seq, e.payload["content"])
        for e in AgentEvent.objects.filter(run=parent, event_type="user_message", seq__lte=seq).order_by(
            "seq"
        )
    ]
    assert child.subject == parent.subject == "cust-9"
    child = _drive(child.run_id, approve=False)
    assert (child.status, child.suspend_reason) == ("suspended", "awaiting_input"), (
        seq,
        child.suspend_detail,
    )
    copies = [e for e in AgentEvent.objects.filter(run=child, event_type="user_message").order_by("seq")]
    assert [(e.payload["forked_from"]["seq"], e.payload["content"]) for e in copies] == said
    assert all(e.payload["forked_from"]["run_id"] == str(parent.run_id) for e in copies)
    new = _say(tenant, child.run_id, "m-fork", "Only on the fork.")
    child = _drive(child.run_id, approve=False)
    replies = {
        e.payload["in_reply_to"]: e
        for e in AgentEvent.objects.filter(run=child, event_type="assistant_message")
    }
    assert set(replies) == {e.seq for e in copies} | {new.seq}, seq  # each once, the fork's own included
    assert "Only on the fork" in replies[new.seq].payload["content"]
    assert child.state["answered_through"] == new.seq
    assert not AgentEvent.objects.filter(run=parent, payload__content="Only on the fork.").exists()


def test_a_fork_of_a_conversation_at_every_seq_carries_it_and_answers_the_fork(tenant):
    parent = _chat_parent(tenant)
    for seq in range(1, parent.state_revision + 1):
        child = run_fork(run_id=parent.run_id, at_seq=seq, actor="user:eng")
        _assert_carries_and_answers(tenant, parent, child, seq)
    parent.refresh_from_db()
    assert AgentEvent.objects.filter(run=parent, event_type="user_message").count() == 3  # untouched


def test_a_rewind_of_a_conversation_at_every_seq_carries_it_and_answers_the_rewound_run(tenant):
    for seq in range(1, _chat_parent(tenant).state_revision + 1):
        parent = _chat_parent(tenant)
        child = run_rewind(run_id=parent.run_id, to_seq=seq, actor="user:eng", note="try again").run
        parent.refresh_from_db()
        assert parent.superseded_by_id == child.run_id and parent.status == "cancelled"
        _assert_carries_and_answers(tenant, parent, child, seq)


def test_forks_and_rewinds_keep_the_subject_and_learning_works_on_them(tenant):
    from core.tenancy import tenant_scope
    from memory.models import MemoryItem
    from runs.conversations.learning import run_learn

    parent = _chat_parent(tenant)
    fork = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng", start=False)
    rewound = run_rewind(run_id=parent.run_id, to_seq=3, actor="user:eng").run
    for child in (fork, rewound):
        assert child.subject == "cust-9"
        learned = run_learn(run_id=child.run_id)
        assert learned["kept"] + learned["unchanged"] >= 1, learned
    with tenant_scope(tenant.tenant_id):
        assert MemoryItem.objects.filter(tenant=tenant, subject_id="cust-9").exists()


def test_numbers_jsonb_writes_differently_keep_their_digest(tenant):
    """-0.0 came back from jsonb as 0.0 and 1.2345678901234567e+19 as 12345678901234567000: the state
    read back no longer matched its digest, so a fork at that event was refused as a changed history
    (and an outside worker's run stopped with state_digest_mismatch when its lease was taken over)."""
    odd = {"n": 2, "zero": -0.0, "big": 1.2345678901234567e19, "list": [-1e16, 1e-07, 0.5], "text": "e+ -0.0"}
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input=odd, actor="t").run
    run.refresh_from_db()
    assert state_encode(run.state).digest == run.state_digest  # as read back from the database
    assert (
        run.state["zero"] == 0 and run.state["big"] == 12345678901234567000 and run.state["text"] == "e+ -0.0"
    )
    while run_advance(run_id=run.run_id, worker_id="w").outcome == "committed":
        pass
    for seq in (1, 2):
        child = run_fork(run_id=run.run_id, at_seq=seq, actor="user:eng", start=False)
        assert child.state_digest == AgentEvent.objects.get(run=run, seq=seq).state_digest
    assert canonical_json({"a": -0.0, "b": [1e16]}) == '{"a":0.0,"b":[10000000000000000]}'
