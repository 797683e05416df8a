"""The authoring API (runs/engine/authoring.py) on the real engine: typed state, moves by reference,
ctx.operation against the payments sandbox over HTTP, and durable timers (in-process and with real
worker processes)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

import tests.runs.authoring_flows as flows
from core.errors import InvalidInput
from runs.authoring import Context, State, StepResult, workflow
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.errors import WorkflowDefinitionError
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.processes import flush_redis, wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox, sandbox  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _drive(run: AgentRun, limit: int = 20) -> AgentRun:
    for _ in range(limit):
        if run_advance(run_id=run.run_id, worker_id="w-test").outcome != "committed":
            break
    run.refresh_from_db()
    return run


def test_typed_state_round_trips_through_the_stored_json(tenant):
    run = _drive(run_start(tenant=tenant, workflow_name="test.tally", input={"target": 3}, actor="t").run)
    assert run.status == "completed" and run.result == {"counted": 3}
    assert run.state["target"] == 3 and run.state["counted"] == 3 and len(run.state["seen"]) == 3
    assert "budgets" in run.state  # the engine's keys survive a typed step


def test_an_input_that_does_not_make_the_typed_state_is_refused_before_anything_is_stored(tenant):
    with pytest.raises(InvalidInput) as refused:
        run_start(tenant=tenant, workflow_name="test.tally", input={"target": 2, "colour": "red"}, actor="t")
    assert refused.value.code == "invalid_input" and "colour" in refused.value.message
    assert not AgentRun.objects.exists()


def test_a_move_to_a_function_that_is_not_a_step_of_the_workflow_is_a_definition_error():
    draft = workflow("test.draft", version="1")

    @draft.step
    def only(ctx: Context, state: State) -> StepResult:
        return ctx.complete(state)

    def stranger(ctx: Context, state: State) -> StepResult:
        return ctx.complete(state)

    assert draft.name_of(only) == "only"
    with pytest.raises(WorkflowDefinitionError):
        draft.name_of(stranger)


def _blind(tenant, order_id: str, amount_minor: int = 500, currency: str = "EUR") -> AgentRun:
    data = {"order_id": order_id, "amount_minor": amount_minor, "currency": currency}
    return run_start(tenant=tenant, workflow_name="test.blind", input=data, actor="t").run


def test_an_operation_returns_its_outcome_once_and_a_replay_does_not_send_again(tenant, sandbox):  # noqa: F811
    sandbox.order("o-a1")
    run = _drive(_blind(tenant, "o-a1"))
    assert run.status == "completed" and run.result["status"] == "succeeded"
    [refund] = sandbox.ledger("o-a1")
    assert run.result["ref"] == refund["refund_id"]
    op = ToolOperation.objects.get(run=run)
    assert [h["status"] for h in op.history] == ["prepared", "started", "succeeded"]
    assert (op.tool_name, op.tool_contract_version) == ("test.blind_refund", "v1")


def test_a_definite_refusal_is_a_failed_operation_the_step_sees(tenant, sandbox):  # noqa: F811
    sandbox.order("o-a2")
    run = _drive(_blind(tenant, "o-a2", currency="USD"))  # the order was paid in EUR
    assert run.status == "completed" and run.result["status"] == "failed"
    assert run.result["result"] == {"status": 422}
    assert ToolOperation.objects.get(run=run).status == "failed" and sandbox.ledger("o-a2") == []


def test_an_ambiguous_answer_from_a_tool_without_lookup_is_never_sent_again(tenant, sandbox):  # noqa: F811
    sandbox.order("o-a3")
    sandbox.fault("drop_after_apply", order_id="o-a3", remaining=1)
    run = _drive(_blind(tenant, "o-a3"))
    assert (run.status, run.suspend_reason) == ("suspended", "reconciliation_required")
    op = ToolOperation.objects.get(run=run)
    assert (op.status, op.attempts) == ("unknown", 1)
    assert AgentEvent.objects.filter(run=run, event_type="step_error", step_id="send").count() == 1
    assert _drive(run).status == "suspended"  # nothing but a person moves it
    assert len(sandbox.ledger("o-a3")) == 1


def test_an_operation_id_another_run_prepared_suspends_instead_of_sending(tenant, sandbox):  # noqa: F811
    """Another run's operation is not this run's to send or to report, for the same request or
    another (the same run asking another request is operation_request_changed: test_protocol)."""
    sandbox.order("o-a4")
    assert _drive(_blind(tenant, "o-a4", amount_minor=500)).status == "completed"
    for amount in (700, 500):
        other = _drive(_blind(tenant, "o-a4", amount_minor=amount))
        assert (other.status, other.suspend_reason) == ("suspended", "operation_of_another_run")
    assert len(sandbox.ledger("o-a4")) == 1


def test_a_sleeping_run_is_not_taken_before_its_wake_time_and_then_resumes_as_the_timer(tenant):
    run = run_start(tenant=tenant, workflow_name="test.nap", input={"seconds": 3600}, actor="t").run
    before = timezone.now()
    assert run_advance(run_id=run.run_id, worker_id="w-test").outcome == "committed"
    run.refresh_from_db()
    assert (run.status, run.suspend_reason, run.next_step) == ("suspended", "timer", "wake")
    assert run.resume_requested_by == "timer"
    assert before + timedelta(seconds=3590) < run.wake_at < timezone.now() + timedelta(seconds=3610)
    assert run_advance(run_id=run.run_id, worker_id="w-test").outcome == "not_acquired"
    AgentRun.objects.filter(run_id=run.run_id).update(wake_at=timezone.now())  # the hour has passed
    run = _drive(run)
    assert run.status == "completed" and run.result == {"woke": True}
    verified = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert verified.payload["requested_by"] == "timer" and verified.payload["step"] == "wake"


@pytest.mark.slow
def test_a_timer_outlives_its_worker_and_the_sweep_wakes_the_run(tenant, processes):
    env = {"KEEPER_WORKFLOW_MODULES": flows.__name__}
    worker = processes.worker(pool="solo", env=env)
    processes.beat(env)
    run = run_start(tenant=tenant, workflow_name="test.nap", input={"seconds": 4}, actor="t").run
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).suspend_reason == "timer",
        timeout=60,
        message="the run to fall asleep",
    )
    processes.kill(worker)
    flush_redis()  # the wake-up message is gone with the worker: only the sweep can wake it now
    processes.worker(pool="solo", env=env)
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status == "completed",
        timeout=90,
        message="the sweep to wake the sleeping run",
    )
    asleep = AgentEvent.objects.get(run=run, event_type="run_suspended")
    verified = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert verified.payload["requested_by"] == "timer"
    assert verified.created_at >= datetime.fromisoformat(asleep.payload["wake_at"])  # not a moment early
