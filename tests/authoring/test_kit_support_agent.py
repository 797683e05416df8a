"""The support agent tested with the kit: the orders come from the payments sandbox over HTTP, the
refund itself goes to a fake payments tool the test scripts (applied, not applied, not
authoritative, no answer), and the conversation, the approval and the clock are driven from the test."""

from __future__ import annotations

from runs.authoring.testing import NO_ANSWER, NOT_AUTHORITATIVE, TRUTH
from runs.workflows.refund.workflow import PAYMENTS_REFUND
from tests.runs.workflows.test_refund_workflow import Sandbox, sandbox  # noqa: F401 - the fixture


def _refund_asked(keeper_env, sandbox, order_id: str):  # noqa: F811
    sandbox.order(order_id)
    run = keeper_env.start("support_agent", {}, subject="cust-kit")
    run.assert_waiting("awaiting_input")
    keeper_env.message(run, f"Please refund {order_id}, it arrived broken")
    run.assert_waiting("approval_required", at="approve")
    return run


def _refund_result(request, key):
    return {"refund_id": f"rf-{request['order_id']}", **request, "idempotency_key": key}


def test_a_conversation_refund_goes_to_the_tool_once_after_approval(keeper_env, sandbox):  # noqa: F811
    payments = keeper_env.fake_tool(PAYMENTS_REFUND, result=_refund_result)
    run = _refund_asked(keeper_env, sandbox, "o-s1")
    assert payments.calls == []  # nothing is sent before a person approves

    keeper_env.approve(run, by="user:ana")

    run.assert_waiting("awaiting_input")
    assert [c["request"] for c in payments.calls] == [
        {"order_id": "o-s1", "amount_minor": 2500, "currency": "EUR"}
    ]
    op = run.operation("support-refund:o-s1")
    assert (op.status, op.external_ref) == ("succeeded", "rf-o-s1")
    replies = [e.payload["content"] for e in run.events if e.event_type == "assistant_message"]
    assert "done" in replies[-1]
    assert sandbox.ledger("o-s1") == []  # the real provider was never reached


def test_a_refund_whose_answer_is_lost_and_whose_lookup_cannot_tell_waits_for_a_person(keeper_env, sandbox):  # noqa: F811
    payments = keeper_env.fake_tool(PAYMENTS_REFUND, result=_refund_result)
    payments.calls_answer("time_out_applied").lookups_answer(NOT_AUTHORITATIVE, NO_ANSWER)
    run = _refund_asked(keeper_env, sandbox, "o-s2")
    keeper_env.approve(run)

    run.assert_waiting("reconciliation_required", at="refund")
    assert run.operation("support-refund:o-s2").status == "unknown"
    keeper_env.resume(run)  # the lookup does not answer at all: still in doubt, still waiting
    run.assert_waiting("reconciliation_required", at="refund")

    payments.lookups_answer(TRUTH)  # the provider answers again: it was applied
    keeper_env.resume(run)
    run.assert_waiting("awaiting_input")
    assert len(payments.calls) == 1 and run.operation("support-refund:o-s2").status == "succeeded"


def test_a_not_applied_answer_is_trusted_only_after_the_call_could_have_arrived(
    keeper_env,
    sandbox,  # noqa: F811
    settings,
):
    settings.KEEPER_PAYMENTS_TIMEOUT = 30.0  # the call's deadline: 30 s after it started
    payments = keeper_env.fake_tool(PAYMENTS_REFUND, result=_refund_result)
    payments.calls_answer("worker_dies_not_applied")
    run = _refund_asked(keeper_env, sandbox, "o-s3")
    keeper_env.approve(run)
    assert run.status == "running" and run.operation("support-refund:o-s3").status == "started"

    keeper_env.advance(seconds=settings.KEEPER_LEASE_TTL + 1)  # the dead worker's lease runs out
    # Taken over: the lookup says "not applied", but the first request may still be on its way.
    assert payments.lookups and len(payments.calls) == 1
    assert run.status == "running" and run.operation("support-refund:o-s3").status == "started"

    keeper_env.advance(seconds=30)  # past the call's deadline: "not applied" now means not applied
    run.assert_waiting("awaiting_input")
    assert len(payments.calls) == 2 and run.operation("support-refund:o-s3").status == "succeeded"
