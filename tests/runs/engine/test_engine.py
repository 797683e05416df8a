"""The engine against real PostgreSQL: start, leases with fencing, commit_step, transitions."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.db import wire
from core.digests import canonical_json
from core.tenancy import tenant_bind
from runs.engine.registry import Complete, Step, Workflow, registry
from runs.engine.runs import run_cancel, run_resume, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import IdempotencyConflict, InvalidState, InvalidTransition, UnknownWorkflow
from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.state import state_encode

pytestmark = pytest.mark.django_db


def _start(tenant, n=3, key=None):
    return run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test", idempotency_key=key
    ).run


def _commit(grant, *, owner=None, expected=None, epoch=None, state=None):
    encoded = state_encode(state if state is not None else {**grant.state, "touched": True})
    held = m.Held(
        grant.run_id,
        grant.tenant_id,
        owner or grant.owner,
        epoch if epoch is not None else grant.epoch,
        expected if expected is not None else grant.revision,
        grant.attempt,
    )
    return apply(m.StepCommitted(held, encoded, grant.next_step, "tick", {}))


def test_start_writes_the_run_and_its_first_event_together(tenant):
    run = _start(tenant)
    assert run.status == "running" and run.next_step == "start" and run.state_revision == 1
    [event] = AgentEvent.objects.filter(run=run)
    assert (event.seq, event.event_type, event.state_revision) == (1, "run_started", 1)
    assert event.state_digest == state_encode(run.state).digest and event.state == run.state
    assert run.state["n"] == 3 and run.state["budgets"]["steps"] == {"limit": None, "used": 0}


def test_start_returns_the_run_as_stored_without_reading_it_back(tenant, monkeypatch):
    sent = []
    execute = wire.Statement._execute

    def recorded(self, raw, params):
        sent.append(self.sql.decode())
        return execute(self, raw, params)

    monkeypatch.setattr(wire.Statement, "_execute", recorded)
    with CaptureQueriesContext(connection) as queries:
        run = run_start(
            tenant=tenant, workflow_name="demo.countdown", input={"n": 2, "note": "é"}, actor="test"
        ).run
    assert queries.captured_queries == []
    [insert] = sent  # one statement: the run, its first event, the row back
    assert "INSERT INTO agent_runs" in insert and "INSERT INTO agent_events" in insert
    stored = AgentRun.objects.get(run_id=run.run_id)
    for field in AgentRun._meta.concrete_fields:
        mine, theirs = getattr(run, field.attname), getattr(stored, field.attname)
        assert (mine, type(mine)) == (theirs, type(theirs)), field.attname
    assert not run._state.adding and run._state.db == stored._state.db
    run.status = "suspended"  # a loaded instance: saving it updates the row, never inserts another
    run.suspend_reason = "by_test"
    run.save(update_fields=["status", "suspend_reason"])
    assert AgentRun.objects.get(run_id=run.run_id).suspend_reason == "by_test"


def _finish(ctx, state):
    return Complete(state, {})


for _version in ("1", "2"):
    registry.register(Workflow(name="test.idem", version=_version, steps=(Step("finish", _finish),)))


def test_a_key_used_again_about_another_subject_or_version_is_a_conflict(tenant):
    def start(**kw):
        return run_start(
            tenant=tenant, workflow_name="test.idem", input={"a": 1}, actor="t", idempotency_key="k", **kw
        )

    first = start(subject="cust-1", workflow_version="1").run
    assert start(subject="cust-1", workflow_version="1").run.run_id == first.run_id
    assert start(subject="cust-1").run.run_id == first.run_id  # no version named: a retry after a deploy
    for kw, differs in (
        ({"subject": "cust-2"}, ["subject"]),
        ({"subject": "cust-1", "workflow_version": "2"}, ["workflow_version"]),
        ({}, ["subject"]),
    ):
        with pytest.raises(IdempotencyConflict) as refused:
            start(**kw)
        assert refused.value.details["differs"] == differs and str(first.run_id) in refused.value.message
    with pytest.raises(IdempotencyConflict) as refused:  # another workflow, whatever its input
        run_start(
            tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t", idempotency_key="k"
        )
    assert refused.value.details["differs"] == ["workflow", "subject"]
    with pytest.raises(IdempotencyConflict, match="its subject differs\\)"):
        start(subject="cust-9")
    assert AgentRun.objects.filter(idempotency_key="k").count() == 1


def test_start_is_idempotent_per_tenant_and_key(tenant, other_tenant):
    first = _start(tenant, key="order-7")
    again = _start(tenant, key="order-7")
    assert again.run_id == first.run_id
    with pytest.raises(IdempotencyConflict) as excinfo:
        _start(tenant, n=4, key="order-7")
    assert str(first.run_id) in excinfo.value.message
    elsewhere = _start(other_tenant, key="order-7")
    assert elsewhere.run_id != first.run_id
    assert AgentRun.objects.count() == 1 and AgentEvent.objects.count() == 1  # acme's, bound by the fixture
    with tenant_bind(other_tenant.tenant_id):
        assert AgentRun.objects.get().run_id == elsewhere.run_id and AgentEvent.objects.count() == 1


@pytest.mark.parametrize(
    ("workflow", "payload", "error", "code"),
    [
        ("no.such.workflow", {"n": 1}, UnknownWorkflow, "unknown_workflow"),
        ("demo.countdown", ["not", "an", "object"], InvalidState, "invalid_state"),
        ("demo.countdown", {"n": object()}, InvalidState, "state_not_serializable"),
        ("demo.countdown", {"n": float("nan")}, InvalidState, "state_not_serializable"),
        ("demo.countdown", {"n": 1, "api_key": "sk-live-123"}, InvalidState, "state_has_secret"),
        ("demo.countdown", {"n": 1, "blob": "x" * 300_000}, InvalidState, "state_too_large"),
        ("demo.countdown", {"n": "three"}, Exception, "invalid_input"),
    ],
)
def test_bad_input_is_refused_with_a_reason_and_nothing_is_written(tenant, workflow, payload, error, code):
    with pytest.raises(error) as excinfo:
        run_start(tenant=tenant, workflow_name=workflow, input=payload, actor="test")
    assert excinfo.value.code == code
    assert excinfo.value.message
    assert AgentRun.objects.count() == 0 and AgentEvent.objects.count() == 0


def test_lease_is_exclusive_and_each_acquisition_bumps_the_epoch(tenant):
    run = _start(tenant)
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="a",
            ttl=30,
        )
    )
    assert grant is not None and grant.epoch == 1 and grant.attempt == 1 and grant.previous_owner is None
    assert (
        apply(
            m.LeaseTaken(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner="b",
                ttl=30,
            )
        )
        is None
    )
    assert apply(
        m.LeaseReleased(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="a",
            epoch=1,
        )
    )
    again = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="b",
            ttl=30,
        )
    )
    assert again is not None and again.epoch == 2


def test_commit_needs_the_expected_revision_the_current_epoch_and_the_owner(tenant):
    run = _start(tenant)
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="a",
            ttl=30,
        )
    )
    assert _commit(grant, expected=grant.revision + 1) is None
    assert _commit(grant, epoch=grant.epoch + 1) is None
    assert _commit(grant, owner="intruder") is None
    assert AgentEvent.objects.filter(run=run).count() == 1
    assert _commit(grant) == 2
    assert _commit(grant) is None  # released at commit: the same grant cannot commit twice
    run.refresh_from_db()
    assert run.state_revision == 2 and run.lease_owner is None and run.state["touched"] is True


def _expire_lease(run) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_runs SET lease_expires_at = statement_timestamp() - interval '1 second' "
            "WHERE run_id = %s",
            [run.run_id],
        )


def test_stale_lease_holder_cannot_commit_even_before_the_new_owner_does(tenant):
    run = _start(tenant)
    stale = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="sleepy",
            ttl=30,
        )
    )
    _expire_lease(run)  # the clock moved past the lease (deterministic: no sleeping)
    fresh = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="fresh",
            ttl=30,
        )
    )
    assert fresh is not None and fresh.epoch == stale.epoch + 1 and fresh.previous_owner == "sleepy"
    # The old owner wakes up first, at the same revision: fenced out.
    assert _commit(stale) is None
    assert (
        apply(
            m.LeaseRenewed(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner="sleepy",
                epoch=stale.epoch,
                ttl=30,
            )
        )
        is None
    )
    assert _commit(fresh) == 2
    assert list(AgentEvent.objects.filter(run=run).values_list("seq", "actor")) == [(1, "test"), (2, "fresh")]


@pytest.mark.django_db(transaction=True)
def test_threads_racing_on_one_revision_exactly_one_commits(tenant) -> None:
    run = _start(tenant)
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="shared",
            ttl=30,
        )
    )
    barrier = threading.Barrier(8)
    results: list[object] = []

    def race() -> None:
        from django.db import connection

        barrier.wait()
        try:
            with tenant_bind(tenant.tenant_id):  # each thread's own connection, as a worker's task
                results.append(_commit(grant))
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == [2] + [None] * 7
    run.refresh_from_db()
    assert run.state_revision == 2 == AgentEvent.objects.filter(run=run).count()


def test_cancel_fences_out_a_worker_in_the_middle_of_a_step(tenant):
    run = _start(tenant)
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="worker",
            ttl=30,
        )
    )
    run_cancel(run_id=run.run_id, actor="user:ops", note="customer withdrew")
    assert _commit(grant) is None
    run.refresh_from_db()
    assert run.status == "cancelled" and run.lease_owner is None
    last = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (last.event_type, last.actor, last.payload["note"]) == (
        "run_cancelled",
        "user:ops",
        "customer withdrew",
    )
    assert last.state_digest == state_encode(run.state).digest
    with pytest.raises(InvalidTransition):
        run_resume(run_id=run.run_id, actor="user:ops")


def test_suspend_and_resume_by_hand_continue_at_the_same_step(tenant):
    run = _start(tenant)
    run_suspend(run_id=run.run_id, actor="user:ops", reason="manual_review", detail="look first")
    run.refresh_from_db()
    assert (run.status, run.suspend_reason, run.next_step) == ("suspended", "manual_review", "start")
    assert run_advance(run_id=run.run_id, worker_id="w").outcome == "not_acquired"
    run_resume(run_id=run.run_id, actor="user:ops", note="checked")
    result = run_advance(run_id=run.run_id, worker_id="w")
    assert (result.outcome, result.event_type) == ("committed", "step_completed")
    run.refresh_from_db()
    assert run.next_step == "tick" and run.suspend_reason is None


def test_a_run_advances_to_completion_with_one_event_per_revision(tenant):
    run = _start(tenant, n=3)
    outcomes = []
    while (result := run_advance(run_id=run.run_id, worker_id="w")).outcome == "committed":
        outcomes.append(result.event_type)
    assert outcomes == ["step_completed"] * 4 + ["run_completed"]
    run.refresh_from_db()
    assert run.status == "completed" and run.result == {"counted": 3}
    seqs = list(AgentEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1))
    last = AgentEvent.objects.get(run=run, seq=run.state_revision)
    assert last.state_digest == state_encode(run.state).digest


def test_a_step_that_returns_an_object_in_state_suspends_the_run_and_keeps_the_old_state(tenant):
    run = run_start(tenant=tenant, workflow_name="test.bad_state", input={"x": 1}, actor="test").run
    result = run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert (result.status, run.status, run.suspend_reason) == (
        "suspended",
        "suspended",
        "state_not_serializable",
    )
    assert run.state["x"] == 1 and "client" not in run.state and run.next_step == "make"
    assert "_Client" in run.suspend_detail


def test_a_step_moving_to_an_unknown_step_suspends(tenant):
    run = run_start(tenant=tenant, workflow_name="test.bad_jump", input={}, actor="test").run
    run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "unknown_step")


def test_a_failing_step_is_retried_then_suspended_with_its_error(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 0
    settings.KEEPER_MAX_ATTEMPTS = 3
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 5}, actor="test").run
    for _ in range(3):
        run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "step_error")
    types = list(AgentEvent.objects.filter(run=run).values_list("event_type", "attempt"))
    assert types == [("run_started", None), ("step_error", 1), ("step_error", 2), ("step_error", 3)]
    assert "flaky failure on attempt 3" in run.suspend_detail


def test_a_flaky_step_succeeds_on_retry(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 0
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 1}, actor="test").run
    run_advance(run_id=run.run_id, worker_id="w")
    run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert run.status == "completed" and run.result == {"attempt": 2}


def test_retry_backoff_holds_the_run_until_it_is_due(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 30
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 1}, actor="test").run
    run_advance(run_id=run.run_id, worker_id="w")
    assert run_advance(run_id=run.run_id, worker_id="w").outcome == "not_acquired"
    assert (
        apply(
            m.RunsRedispatched(
                grace=0,
                limit=10,
            )
        )
        == []
    )


def test_too_many_crashed_attempts_suspend_instead_of_looping(tenant, settings):
    settings.KEEPER_MAX_ATTEMPTS = 2
    run = _start(tenant)
    for owner in ("w1", "w2"):  # two workers take the lease and die without committing
        grant = apply(
            m.LeaseTaken(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner=owner,
                ttl=0.01,
            )
        )
        assert grant is not None
        time.sleep(0.02)
    result = run_advance(run_id=run.run_id, worker_id="w3")
    run.refresh_from_db()
    assert (result.status, run.suspend_reason) == ("suspended", "too_many_attempts")
    types = list(AgentEvent.objects.filter(run=run).values_list("event_type", flat=True))
    assert types == ["run_started", "resume_verified", "run_suspended"]


def test_sweep_claims_only_runs_that_nobody_holds_or_woke_lately(tenant):
    idle = _start(tenant)
    held = _start(tenant)
    done = _start(tenant, n=0)
    while run_advance(run_id=done.run_id, worker_id="w").outcome == "committed":
        pass
    apply(
        m.LeaseTaken(
            run_id=held.run_id,
            tenant_id=held.tenant_id,
            owner="alive",
            ttl=30,
        )
    )
    assert apply(
        m.RunsRedispatched(
            grace=0,
            limit=10,
        )
    ) == [idle.run_id]
    assert (
        apply(
            m.RunsRedispatched(
                grace=60,
                limit=10,
            )
        )
        == []
    )  # just dispatched


def test_workflow_registry_refuses_unknown_versions():
    with pytest.raises(UnknownWorkflow):
        registry.get("demo.countdown", "999")
    assert registry.get("demo.countdown").version == "1"


def test_canonical_json_is_stable_across_key_order():
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_json(
        {"a": [1, {"c": 3, "d": 2}], "b": 1}
    )


def test_a_worker_fenced_by_a_new_revision_mid_step_gives_the_lease_back_at_once(tenant):
    import tests.workflows  # noqa: F401 - registers test.interrupted

    run = run_start(tenant=tenant, workflow_name="test.interrupted", input={}, actor="test").run
    result = run_advance(run_id=run.run_id, worker_id="w-1")
    assert result.outcome == "fenced"
    run.refresh_from_db()
    assert run.lease_owner is None and run.lease_expires_at is None  # not held for a whole TTL
    again = run_advance(run_id=run.run_id, worker_id="w-2")  # at once, not after the lease expires
    assert (again.outcome, again.status) == ("committed", "completed")
    run.refresh_from_db()
    assert run.result == {"attempt": 2}


def test_a_worker_fenced_by_a_newer_epoch_leaves_the_new_holders_lease_alone(tenant):
    run = _start(tenant)
    stale = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="old",
            ttl=0.01,
        )
    )
    time.sleep(0.05)
    fresh = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="new",
            ttl=30,
        )
    )
    assert fresh is not None and not apply(
        m.LeaseReleased(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="old",
            epoch=stale.epoch,
        )
    )
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_epoch) == ("new", fresh.epoch)


def test_steps_committed_within_a_second_keep_updated_at_and_a_new_status_moves_it(tenant):
    """updated_at is indexed three times: a run stepping on in one status moves it at most once a second
    (so its commits are HOT updates); the revision moves every time, and a change of status moves both."""
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
    run_advance(run_id=run.run_id)  # begin: running
    first = AgentRun.objects.get(run_id=run.run_id)
    run_advance(run_id=run.run_id)  # a tick, well within the second
    second = AgentRun.objects.get(run_id=run.run_id)
    assert second.state_revision == first.state_revision + 1
    assert second.status == first.status == "running" and second.updated_at == first.updated_at
    time.sleep(1.1)
    run_advance(run_id=run.run_id)  # a tick a second later
    third = AgentRun.objects.get(run_id=run.run_id)
    assert third.updated_at > second.updated_at
    run_advance(run_id=run.run_id)  # finish: completed at once, a new status
    done = AgentRun.objects.get(run_id=run.run_id)
    assert done.status == "completed" and done.updated_at > third.updated_at


def test_counted_budgets_stay_whole_numbers(tenant):
    run = _start(tenant, n=2)
    run_advance(run_id=run.run_id, worker_id="w", sliced=True)
    run.refresh_from_db()
    budgets = run.state["budgets"]
    assert run.status == "completed" and budgets["steps"]["used"] == 4
    assert type(budgets["steps"]["used"]) is int and type(budgets["tokens"]["used"]) is int
    assert isinstance(budgets["wall_s"]["used"], float)
    last = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert last.state_digest == state_encode(
        last.state
    ).digest and '"steps":{"limit":null,"used":4}' in canonical_json(last.state)
