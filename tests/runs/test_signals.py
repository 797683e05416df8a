"""Signals and queries of authored workflows: a signal delivered while the run waits, sent before it
waits, sent twice with one key, timing out; the API's 4xx for bad signals (nothing stored) and
read-only queries. With real worker processes where a worker is involved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

import tests.runs.signals_flows as flows
from runs.authoring import Context, State, StepResult, workflow
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.errors import WorkflowDefinitionError
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(db):
    client = APIClient()
    staff = get_user_model().objects.create_user(
        "ops", password="pw-for-tests", is_staff=True, is_superuser=True
    )
    client.force_authenticate(staff)
    return client


def _start(tenant, **input) -> AgentRun:
    return run_start(tenant=tenant, workflow_name=flows.parcel.name, input=input, actor="t").run


def _drive(run: AgentRun, limit: int = 20) -> AgentRun:
    for _ in range(limit):
        if run_advance(run_id=run.run_id, worker_id="w-test").outcome != "committed":
            break
    run.refresh_from_db()
    return run


def _signal(api, run: AgentRun, name: str, payload, key: str | None = "k-1"):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return api.post(f"/api/v1/runs/{run.run_id}/signals/{name}", payload, format="json", **headers)


def _events(run: AgentRun) -> int:
    return AgentEvent.objects.filter(run_id=run.run_id).count()


def test_a_run_waits_for_its_signal_and_the_signal_resumes_it_with_its_payload(api, tenant):
    run = _drive(_start(tenant))
    assert (run.status, run.suspend_reason) == ("suspended", "signal")
    assert "shipped" in run.suspend_detail and run.wake_at is None and run.resume_requested_at is None
    sent = _signal(api, run, "shipped", {"tracking": "ZX-1"})
    assert sent.status_code == 201, sent.content
    assert sent.data["event_type"] == "signal_received"
    run.refresh_from_db()
    assert run.resume_requested_at is not None  # asked to resume in the signal's own statement
    run = _drive(run)
    assert run.status == "completed" and run.result == {"shipped": [{"tracking": "ZX-1"}]}


def test_a_signal_sent_before_the_run_waits_is_kept_and_handed_over(api, tenant):
    run = _start(tenant)
    assert _signal(api, run, "shipped", {"tracking": "early"}).status_code == 201
    run = _drive(run)
    assert run.status == "completed" and run.result == {"shipped": [{"tracking": "early"}]}
    assert not AgentEvent.objects.filter(run=run, event_type="run_suspended").exists()


def test_signals_are_consumed_once_each_in_the_order_they_came(api, tenant):
    run = _start(tenant, parcels=3)
    assert _signal(api, run, "shipped", {"n": 1}, key="a").status_code == 201
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "signal")
    assert _signal(api, run, "shipped", {"n": 2}, key="b").status_code == 201
    assert _signal(api, run, "shipped", {"n": 3}, key="c").status_code == 201
    run = _drive(run)
    assert run.status == "completed" and run.result == {"shipped": [{"n": 1}, {"n": 2}, {"n": 3}]}


def test_a_duplicate_signal_with_the_same_key_returns_the_first_answer_and_stores_nothing(api, tenant):
    run = _start(tenant, parcels=2)
    first = _signal(api, run, "shipped", {"tracking": "ZX-1"}, key="dup")
    count = _events(run)
    again = _signal(api, run, "shipped", {"tracking": "ZX-1"}, key="dup")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.data["seq"] == first.data["seq"] and _events(run) == count
    other = _signal(api, run, "shipped", {"tracking": "ZX-2"}, key="dup")  # the key for another signal
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert _events(run) == count
    run = _drive(run)  # one parcel shipped, not two: the duplicate was not a second signal
    assert (run.status, run.suspend_reason) == ("suspended", "signal")
    assert api.get(f"/api/v1/runs/{run.run_id}/queries/progress").data["answer"] == {"shipped": 1, "of": 2}


def test_a_wait_with_a_timeout_sleeps_until_then_and_times_out(tenant):
    before = timezone.now()
    run = _drive(_start(tenant, timeout=2))
    assert (run.status, run.suspend_reason) == ("suspended", "signal")
    assert before + timedelta(seconds=1) < run.wake_at < timezone.now() + timedelta(seconds=3)
    assert run.resume_requested_by == "timer"
    assert run_advance(run_id=run.run_id, worker_id="w-test").outcome == "not_acquired"
    wait_until(lambda: _drive(run).status == "completed", timeout=30, message="the wait to time out")
    run.refresh_from_db()
    assert run.result == {"timed_out": True}
    assert AgentEvent.objects.filter(run=run, event_type="run_suspended").count() == 1


def test_a_signal_cuts_a_timeout_short(api, tenant):
    run = _drive(_start(tenant, timeout=3600))
    assert run.wake_at is not None
    assert _signal(api, run, "shipped", {"tracking": "in-time"}).status_code == 201
    run.refresh_from_db()
    assert run.wake_at is None
    run = _drive(run)
    assert run.status == "completed" and run.result == {"shipped": [{"tracking": "in-time"}]}


def test_bad_signals_are_refused_with_a_reason_and_store_nothing(api, tenant):
    run = _drive(_start(tenant))
    count = _events(run)
    unknown = _signal(api, run, "teleported", {})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_signal"
    no_key = _signal(api, run, "shipped", {}, key=None)
    assert no_key.status_code == 422 and no_key.json()["error"]["code"] == "invalid_idempotency_key"
    assert _events(run) == count
    api.post(f"/api/v1/runs/{run.run_id}/cancel", {"note": "t"}, format="json")
    count = _events(run)
    finished = _signal(api, run, "shipped", {"tracking": "late"}, key="late")
    assert finished.status_code == 409 and finished.json()["error"]["code"] == "run_finished"
    assert _events(run) == count


def test_a_run_of_a_workflow_without_signals_accepts_none(api, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    count = _events(run)
    refused = _signal(api, run, "shipped", {})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "unknown_signal"
    assert _events(run) == count


def test_waiting_for_an_undeclared_signal_is_a_step_error_that_names_it(tenant):
    wf = workflow("test.undeclared_signal", version="1")
    with pytest.raises(WorkflowDefinitionError):
        wf.signal("not an identifier")

    @wf.step
    def only(ctx: Context, state: State) -> StepResult:
        ctx.wait_signal("nobody_sends_this")
        return ctx.complete(state)

    wf.register()
    run = run_start(tenant=tenant, workflow_name=wf.name, input={}, actor="t").run
    assert run_advance(run_id=run.run_id, worker_id="w-test").outcome == "committed"
    error = AgentEvent.objects.get(run=run, event_type="step_error")
    assert error.payload["error_type"] == "WorkflowSignalUndeclared"
    assert "nobody_sends_this" in error.payload["message"]


def test_a_query_reads_the_state_and_changes_nothing(api, tenant):
    run = _drive(_start(tenant, parcels=2))
    revision = run.state_revision
    answer = api.get(f"/api/v1/runs/{run.run_id}/queries/progress")
    assert answer.status_code == 200 and answer.data == {
        "query": "progress",
        "answer": {"shipped": 0, "of": 2},
    }
    missing = api.get(f"/api/v1/runs/{run.run_id}/queries/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_query"
    broken = api.get(f"/api/v1/runs/{run.run_id}/queries/broken")
    assert broken.status_code == 409 and broken.json()["error"]["code"] == "query_failed"
    assert "KeyError" in broken.json()["error"]["message"]
    run.refresh_from_db()
    assert run.state_revision == revision


def test_a_query_reads_a_checkpoint_of_an_older_schema_as_migrated(api, tenant):
    """Not the stored, unmigrated state: a query written for the current schema would break on every
    run suspended before the deploy."""
    from runs.engine.state_migrations import SchemaSet

    schemas = SchemaSet(
        validators={1: lambda s: None, 2: lambda s: None},
        migrations={(1, 2): lambda s: {**s, "carrier": "unknown"}},
    )
    wf = workflow("test.carrier", version="1", signals=("go",), schemas=schemas)

    @wf.step
    def wait(ctx: Context, state: State) -> StepResult:
        ctx.wait_signal("go")
        return ctx.complete(state, {})

    @wf.query
    def where(state: State) -> dict[str, object]:
        return {"carrier": state["carrier"]}

    wf.register()
    run = run_start(tenant=tenant, workflow_name="test.carrier", input={"carrier": "dhl"}, actor="t").run
    assert api.get(f"/api/v1/runs/{run.run_id}/queries/where").data["answer"] == {"carrier": "dhl"}
    # As stored before the deploy that brought schema 2: no carrier yet.
    AgentRun.objects.filter(run_id=run.run_id).update(state_schema_version=1, state={"budgets": {}})
    answer = api.get(f"/api/v1/runs/{run.run_id}/queries/where")
    assert answer.status_code == 200 and answer.data["answer"] == {"carrier": "unknown"}
    assert AgentRun.objects.get(run_id=run.run_id).state == {"budgets": {}}  # nothing written


@pytest.mark.slow
def test_signals_with_real_workers_delivered_while_waiting_and_a_timeout(api, tenant, processes):
    processes.worker(pool="solo", env={"KEEPER_WORKFLOW_MODULES": flows.__name__})
    waiting = _start(tenant)
    timing_out = _start(tenant, timeout=3)
    wait_until(
        lambda: AgentRun.objects.get(run_id=waiting.run_id).suspend_reason == "signal",
        timeout=60,
        message="the run to wait for its signal",
    )
    assert _signal(api, waiting, "shipped", {"tracking": "W-1"}).status_code == 201
    wait_until(
        lambda: AgentRun.objects.get(run_id=waiting.run_id).status == "completed",
        timeout=90,
        message="the signal to resume the run on the worker",
    )
    wait_until(
        lambda: AgentRun.objects.get(run_id=timing_out.run_id).status == "completed",
        timeout=90,
        message="the signal wait to time out on the worker",
    )
    assert AgentRun.objects.get(run_id=waiting.run_id).result == {"shipped": [{"tracking": "W-1"}]}
    assert AgentRun.objects.get(run_id=timing_out.run_id).result == {"timed_out": True}


def test_a_signal_consumed_before_a_later_wait_suspends_the_step_is_seen_again_on_its_rerun(api, tenant):
    run = run_start(tenant=tenant, workflow_name=flows.pair.name, input={}, actor="t").run
    assert _signal(api, run, "left", {"l": 1}, key="l").status_code == 201
    run = _drive(run)
    assert (run.status, run.suspend_detail) == ("suspended", "waiting for signal right")
    assert _signal(api, run, "right", {"r": 1}, key="r").status_code == 201
    run = _drive(run)
    assert run.status == "completed" and run.result == {"left": {"l": 1}, "right": {"r": 1}}


def test_a_typed_state_keeps_what_it_consumed_across_steps(api, tenant):
    run = run_start(tenant=tenant, workflow_name=flows.pinger.name, input={"wanted": 2}, actor="t").run
    assert _signal(api, run, "ping", "a", key="a").status_code == 201
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "signal")
    assert _signal(api, run, "ping", "b", key="b").status_code == 201
    run = _drive(run)
    assert run.status == "completed" and run.result == {"got": ["a", "b"]}


def test_a_signal_fences_a_step_in_flight_which_then_runs_again_and_sees_it(api, tenant):
    from runs.engine.leases import lease_held
    from runs.engine.steps import _advance_slice
    from runs.kernel import apply
    from runs.kernel import moves as m
    from runs.kernel.errors import ConcurrentResume

    run = _start(tenant)
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w-slow",
            ttl=60,
        )
    )
    assert grant is not None  # a worker holds the run and is about to run its step
    assert _signal(api, run, "shipped", {"tracking": "mid-step"}).status_code == 201
    with lease_held(grant) as lease, pytest.raises(ConcurrentResume):
        _advance_slice(grant, lease, sliced=False)  # it read the run before the signal: its commit is refused
    assert not AgentEvent.objects.filter(run=run, event_type="run_suspended").exists()
    apply(
        m.LeaseReleased(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w-slow",
            epoch=grant.epoch,
        )
    )
    run = _drive(run)
    assert run.status == "completed" and run.result == {"shipped": [{"tracking": "mid-step"}]}
