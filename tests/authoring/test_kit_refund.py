"""The refund workflow (practicum 33.1) tested with the kit: the payments sandbox over HTTP is the
outside world; approvals are decided and the clock moved from the test, the engine is the real one."""

from __future__ import annotations

import pytest

from runs.engine.approvals import ApprovalExpired
from tests.runs.workflows.test_refund_workflow import Sandbox, sandbox  # noqa: F401 - the fixture


def test_an_approved_refund_is_made_once_and_verified(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-k1")
    run = keeper_env.start("refund", {"order_id": "o-k1", "reason": "arrived broken"})
    run.assert_waiting("approval_required", at="approve")
    assert run.steps_run == ["lookup_order", "decide", "approve"]
    assert sandbox.ledger("o-k1") == []

    keeper_env.approve(run, by="user:ana", note="ok")

    run.assert_completed().assert_events("approval_approved", "resume_verified", "run_completed")
    [refund] = sandbox.ledger("o-k1")
    assert run.result == {
        "refunded": True,
        "outcome": "refunded",
        "refund_id": refund["refund_id"],
        "amount_minor": 2500,
        "currency": "EUR",
    }
    assert run.operation("refund:o-k1").status == "succeeded"


def test_a_rejected_refund_completes_without_sending_anything(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-k2")
    run = keeper_env.start("refund", {"order_id": "o-k2"})
    keeper_env.reject(run, note="worn, not refundable")
    run.assert_completed(result={"refunded": False, "outcome": "rejected", "note": "worn, not refundable"})
    assert run.operations == [] and sandbox.ledger("o-k2") == []


def test_an_approval_left_a_day_expires_and_the_run_asks_again(keeper_env, sandbox, settings):  # noqa: F811
    sandbox.order("o-k3")
    run = keeper_env.start("refund", {"order_id": "o-k3"})
    first = keeper_env.approval(run)

    keeper_env.advance(seconds=settings.KEEPER_APPROVAL_TTL + 60)  # nobody decided for a day
    with pytest.raises(ApprovalExpired):
        keeper_env.approve(run)
    keeper_env.run_until_idle()

    run.assert_waiting("approval_required", at="approve").assert_events("approval_expired", "run_suspended")
    second = keeper_env.approval(run)
    assert second.approval_id != first.approval_id and second.expires_at > keeper_env.now()
    assert sandbox.ledger("o-k3") == []
    keeper_env.approve(run)
    run.assert_completed()
    assert len(sandbox.ledger("o-k3")) == 1


def test_a_refund_in_doubt_waits_for_a_person_then_settles_from_the_lookup(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-k4")
    sandbox.fault("drop_after_apply", remaining=1)  # applied, and the answer never arrives
    sandbox.fault("lookup_non_authoritative", remaining=1)  # and the first lookup cannot tell
    run = keeper_env.start("refund", {"order_id": "o-k4"})
    keeper_env.approve(run)

    run.assert_waiting("reconciliation_required", at="refund")
    assert run.operation("refund:o-k4").status == "unknown"
    assert len(sandbox.ledger("o-k4")) == 1  # it was applied: sending again would pay twice

    keeper_env.resume(run, note="the provider answers again")  # the lookup is authoritative now

    run.assert_completed()
    assert run.operation("refund:o-k4").status == "succeeded"
    assert len(sandbox.ledger("o-k4")) == 1
