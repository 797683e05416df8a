"""Slices: a worker holding a run's lease runs its steps back to back, each committed and fenced,
until the run stops moving or KEEPER_SLICE_STEPS / KEEPER_SLICE_MS are used up."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings as django_settings

from core.tenancy import tenant_bind
from runs.engine.registry import Complete, Next, State, Step, StepContext, StepResult, Workflow, registry
from runs.engine.runs import run_cancel, run_start
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.state import state_encode
from tests.processes import flush_redis

pytestmark = pytest.mark.django_db

RAN: list[tuple[str, int]] = []  # (step, attempt) of every step this process ran


def _one(ctx: StepContext, state: State) -> StepResult:
    RAN.append(("one", ctx.attempt))
    time.sleep(state.get("sleep_s", 0))
    return Next(state, "two")


def _two(ctx: StepContext, state: State) -> StepResult:
    RAN.append(("two", ctx.attempt))
    what = state.get("at_two")
    if ctx.attempt == 1:
        if what == "cancel":  # a person cancels while the step runs
            run_cancel(run_id=ctx.run_id, actor="user:ops", note="stop")
        elif what == "message":  # a message arrives while the step runs
            apply(
                m.MessageAppended(
                    run_id=ctx.run_id,
                    tenant_id=ctx.tenant_id,
                    event_type="user_message",
                    payload={"content": "mid-slice"},
                    actor="user:x",
                    client_message_id="mid-slice",
                )
            )
        elif what == "crash":  # the process dies here: nothing below run_advance cleans up
            raise SystemExit(137)
        elif what == "error":
            raise RuntimeError("flaky in the middle of a slice")
    time.sleep(state.get("sleep_s", 0))
    return Next({**state, "two_attempt": ctx.attempt}, "three")


def _three(ctx: StepContext, state: State) -> StepResult:
    RAN.append(("three", ctx.attempt))
    time.sleep(state.get("sleep_s", 0))
    return Complete(state, {"two_attempt": state.get("two_attempt")})


registry.register(
    Workflow(
        name="test.slice", version="1", steps=(Step("one", _one), Step("two", _two), Step("three", _three))
    )
)


@pytest.fixture(autouse=True)
def _fresh():
    RAN.clear()
    flush_redis()
    yield
    flush_redis()


def _start(tenant, **state):
    return run_start(tenant=tenant, workflow_name="test.slice", input=state, actor="test").run


def _countdown(tenant, n):
    return run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test").run


def _events(run):
    return list(
        AgentEvent.objects.filter(run=run).order_by("seq").values_list("event_type", "step_id", "attempt")
    )


def _queued() -> int:
    return redis.Redis.from_url(django_settings.REDIS_URL).llen("celery")


def test_a_slice_runs_the_steps_back_to_back_under_one_lease_each_committed(tenant):
    run = _countdown(tenant, 3)
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert (result.outcome, result.status, result.event_type, result.steps) == (
        "committed",
        "completed",
        "run_completed",
        5,
    )
    run.refresh_from_db()
    assert run.status == "completed" and run.lease_epoch == 1 and run.lease_owner is None
    events = _events(run)
    assert events == [("run_started", None, None)] + [
        ("step_completed", s, 1) for s in ("start",) + ("tick",) * 3
    ] + [("run_completed", "finish", 1)]
    seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1))
    assert run.state["ticks"] == [2, 3, 4]  # each step saw the revision the previous one committed


def test_a_slice_encodes_each_state_once(tenant, monkeypatch):
    from runs.engine import steps
    from runs.kernel import decide

    encoded = []

    def counting(state):
        encoded.append(state.get("remaining"))
        return state_encode(state)

    monkeypatch.setattr(steps, "state_encode", counting)
    monkeypatch.setattr(decide, "state_encode", counting)  # the kernel encodes what it decides
    run = _countdown(tenant, 3)
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert result.steps == 5
    # the state the lease read, then each step's new state; a step after the first starts from the
    # state its predecessor committed, as encoded for that commit
    assert len(encoded) == 1 + 5
    run.refresh_from_db()
    assert [e.state_digest for e in AgentEvent.objects.filter(run=run).order_by("seq")][1:] == [
        state_encode(e.state).digest for e in AgentEvent.objects.filter(run=run).order_by("seq")
    ][1:]


def test_without_a_slice_a_call_runs_one_step(tenant):
    run = _countdown(tenant, 3)
    result = run_advance(run_id=run.run_id, worker_id="w")
    assert (result.event_type, result.steps) == ("step_completed", 1)
    run.refresh_from_db()
    assert run.next_step == "tick" and run.lease_owner is None


def test_a_used_up_step_slice_releases_the_lease_and_wakes_the_run(tenant, settings):
    settings.KEEPER_SLICE_STEPS = 2
    run = _countdown(tenant, 3)
    before = _queued()
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert (result.status, result.steps) == ("running", 2)
    run.refresh_from_db()
    assert (run.next_step, run.lease_owner, run.lease_expires_at, run.attempt) == ("tick", None, None, 0)
    assert _queued() == before + 1  # woken through the broker, like any step's end before slices
    again = run_advance(run_id=run.run_id, worker_id="w2", sliced=True)
    assert again.steps == 2
    run.refresh_from_db()
    assert run.lease_epoch == 2 and run.state["remaining"] == 0


def test_a_used_up_time_slice_releases_the_lease_after_the_step(tenant, settings):
    settings.KEEPER_SLICE_MS = 0
    run = _countdown(tenant, 3)
    calls = 0
    while run_advance(run_id=run.run_id, worker_id="w", sliced=True).outcome == "committed":
        calls += 1
    run.refresh_from_db()
    assert run.status == "completed" and calls == 5 and run.lease_epoch == 5


def test_a_cancel_mid_slice_stops_it_at_the_next_step_boundary(tenant):
    run = _start(tenant, at_two="cancel")
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert result.outcome == "fenced"
    run.refresh_from_db()
    assert run.status == "cancelled" and run.lease_owner is None
    assert RAN == [("one", 1), ("two", 1)]  # step three never ran
    assert [e[0] for e in _events(run)] == ["run_started", "step_completed", "run_cancelled"]
    assert _queued() == 0  # a cancelled run is not woken
    assert run_advance(run_id=run.run_id, worker_id="w2", sliced=True).outcome == "not_acquired"


def test_a_message_mid_slice_fences_the_step_which_reruns_with_it(tenant):
    run = _start(tenant, at_two="message")
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert result.outcome == "fenced"
    run.refresh_from_db()
    assert (run.status, run.next_step, run.lease_owner) == ("running", "two", None)  # given back at once
    assert _queued() == 1
    again = run_advance(run_id=run.run_id, worker_id="w2", sliced=True)
    assert (again.status, again.steps) == ("completed", 2)
    assert RAN == [("one", 1), ("two", 1), ("two", 2), ("three", 1)]  # as a fenced step always was
    assert [e[0] for e in _events(run)] == [
        "run_started",
        "step_completed",
        "user_message",
        "step_completed",
        "run_completed",
    ]


def test_a_step_error_mid_slice_ends_it_with_the_retry_backoff(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 30
    run = _start(tenant, at_two="error")
    result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    assert (result.status, result.event_type, result.steps) == ("retrying", "step_error", 2)
    run.refresh_from_db()
    assert run.lease_owner is None and run.wake_at is not None and run.attempt == 1
    assert run_advance(run_id=run.run_id, worker_id="w2", sliced=True).outcome == "not_acquired"
    assert (
        apply(
            m.RunsRedispatched(
                grace=0,
                limit=10,
            )
        )
        == []
    )
    assert [e[:3] for e in _events(run)][-1] == ("step_error", "two", 1)


def test_a_crash_mid_slice_is_taken_over_at_that_step_and_counted_as_an_attempt(tenant, settings):
    settings.KEEPER_LEASE_TTL = 0.5
    run = _start(tenant, at_two="crash")
    with pytest.raises(SystemExit):
        run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    run.refresh_from_db()
    assert (run.next_step, run.lease_owner, run.attempt) == ("two", "w", 1)  # still held, one attempt
    assert run_advance(run_id=run.run_id, worker_id="w2", sliced=True).outcome == "not_acquired"
    time.sleep(0.7)  # the dead worker's lease expires
    result = run_advance(run_id=run.run_id, worker_id="w2", sliced=True)
    assert result.status == "completed"
    run.refresh_from_db()
    assert run.result == {"two_attempt": 2}
    takeover = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert takeover.payload["trigger"] == "lease_takeover" and takeover.payload["step"] == "two"
    assert takeover.payload["previous_owner"] == "w"
    assert [(s, a) for _, s, a in _events(run) if s == "two"] == [("two", 2)]  # committed once


def test_a_step_that_crashed_in_a_slice_counts_towards_max_attempts(tenant, settings):
    settings.KEEPER_LEASE_TTL = 0.5
    settings.KEEPER_MAX_ATTEMPTS = 1
    run = _start(tenant, at_two="crash")
    with pytest.raises(SystemExit):
        run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    time.sleep(0.7)
    result = run_advance(run_id=run.run_id, worker_id="w2", sliced=True)
    run.refresh_from_db()
    assert (result.status, run.suspend_reason) == ("suspended", "too_many_attempts")
    assert RAN == [("one", 1), ("two", 1)]


@pytest.mark.django_db(transaction=True)  # the heartbeat and the thief use connections of their own
def test_the_heartbeat_keeps_the_lease_through_a_slice_longer_than_its_ttl(tenant, settings):
    # A TTL of 1.5 s, not less: with 0.6 s a heartbeat held up a few hundred ms by a loaded machine
    # (the whole suite on two cores) let the thief in, and the test failed now and then.
    settings.KEEPER_LEASE_TTL = 1.5
    settings.KEEPER_SLICE_MS = 60_000
    run = _start(tenant, sleep_s=1.2)  # three steps, 3.6 s in all: more than two lease TTLs
    stolen: list[object] = []
    done = threading.Event()

    def thief() -> None:
        from django.db import connection

        try:
            with tenant_bind(tenant.tenant_id):
                # Steal only once the worker holds the lease: a thief that starts first on a loaded
                # machine takes a free lease, and the test measures the start-up order instead.
                runs = AgentRun.objects.filter(run_id=run.run_id, lease_owner="w")
                while not done.is_set() and not runs.exists():
                    time.sleep(0.01)
                while not done.is_set():
                    stolen.append(
                        apply(
                            m.LeaseTaken(
                                run_id=run.run_id,
                                tenant_id=run.tenant_id,
                                owner="thief",
                                ttl=30,
                            )
                        )
                    )
                    time.sleep(0.1)
        finally:
            connection.close()

    thread = threading.Thread(target=thief)
    thread.start()
    try:
        result = run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    finally:
        done.set()
        thread.join()
    assert (result.outcome, result.status, result.steps) == ("committed", "completed", 3)
    assert len(stolen) >= 10 and not any(stolen)  # the thief tried all along and never got in
    run.refresh_from_db()
    assert run.lease_epoch == 1 and run.state["two_attempt"] == 1


def test_the_lease_carried_to_the_next_step_keeps_every_field_it_does_not_move() -> None:
    """The grant a slice carries to its next step is built field by field: a field added to
    LeaseGrant must be named here, moved by _carry or kept from the grant."""
    import dataclasses
    import uuid
    from datetime import UTC, datetime

    from runs.engine.steps import _carry
    from runs.kernel.records import LeaseGrant

    moved = {"revision", "next_step", "state", "status", "resume_requested_by", "attempt", "previous_owner",
             "previous_epoch"}  # fmt: skip
    kept = {"run_id", "tenant_id", "owner", "epoch", "expires_at", "workflow_name", "workflow_version",
            "state_schema_version", "child_of_run_id", "replay"}  # fmt: skip
    assert {f.name for f in dataclasses.fields(LeaseGrant)} == moved | kept
    grant = LeaseGrant(uuid.uuid4(), uuid.uuid4(), "w-1", 7, datetime(2026, 1, 2, tzinfo=UTC), 11, "one",
                       {"a": 1}, "suspended", "user:ops", "flow", "v3", 4, 3, "w-0", 6, uuid.uuid4(),
                       True)  # fmt: skip
    workflow = Workflow(name="flow", version="v3", steps=(Step("one", _one), Step("two", _two)))
    carried = _carry(grant, workflow, 12, "two", state_encode({"b": 2}))
    for name in kept:
        assert getattr(carried, name) == getattr(grant, name), name
    assert (carried.revision, carried.next_step, carried.state, carried.status) == (
        12,
        "two",
        {"b": 2},
        "running",
    )
    assert (carried.resume_requested_by, carried.attempt, carried.previous_owner, carried.previous_epoch) == (
        "",
        1,
        None,
        7,
    )
