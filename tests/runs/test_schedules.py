"""Schedules: cron parsing, slots, the overlap policy, missed slots, bad input, erasure (in process).

The two-beat test with real worker processes is tests/runs/test_schedules_beats.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections, transaction

from core.errors import InvalidInput
from core.tenancy import tenant_bind
from erasure.erasers.schedules import SchedulesEraser
from erasure.matching import Scope
from runs.engine.cron import cron_parse
from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.schedules import (
    schedule_create,
    schedule_slot_key,
    schedule_update,
    schedules_fire_tenant,
)
from runs.engine.steps import run_advance
from runs.kernel.errors import UnknownWorkflow
from runs.kernel.models import AgentRun

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday


def _drive(run_id) -> AgentRun:
    for _ in range(20):
        if run_advance(run_id=run_id, worker_id="w-test").outcome != "committed":
            break
    return AgentRun.objects.get(run_id=run_id)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", T0 + timedelta(minutes=1), T0 + timedelta(minutes=15)),
        ("0 9 * * 1-5", T0, datetime(2026, 3, 3, 9, 0, tzinfo=UTC)),
        ("30 2 1 * *", T0, datetime(2026, 4, 1, 2, 30, tzinfo=UTC)),
        ("0 0 * * 0", T0, datetime(2026, 3, 8, 0, 0, tzinfo=UTC)),  # Sunday as 0
        ("0 0 * * 7", T0, datetime(2026, 3, 8, 0, 0, tzinfo=UTC)),  # and as 7
        ("0 0 13 * 5", T0, datetime(2026, 3, 6, 0, 0, tzinfo=UTC)),  # day 13 OR a Friday
        ("0 0 29 2 *", T0, datetime(2028, 2, 29, 0, 0, tzinfo=UTC)),
        ("5,10 10 * * *", T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)),
    ],
)
def test_a_cron_expression_gives_the_next_slot_strictly_after_a_moment(expression, after, expected):
    assert cron_parse(expression).next_after(after) == expected


def test_the_latest_slot_at_or_before_a_moment_is_the_one_after_downtime():
    cron = cron_parse("*/5 * * * *")
    assert cron.latest_at_or_before(T0 + timedelta(minutes=17, seconds=40)) == T0 + timedelta(minutes=15)
    assert cron.latest_at_or_before(T0) == T0


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("* * * *", "5 fields"),
        ("60 * * * *", "outside 0-59"),
        ("* 24 * * *", "outside 0-23"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("@hourly", "5 fields"),
        ("0 0 * JAN *", "not a number"),
        ("0 0 31 2 *", "never fires"),
        ("1,,2 * * * *", "not a number"),
        ("² * * * *", "not a number"),  # a digit to str.isdigit, not to int()
    ],
)
def test_a_cron_expression_that_does_not_parse_says_why(expression, reason):
    with pytest.raises(InvalidInput) as caught:
        cron_parse(expression)
    assert caught.value.code == "invalid_cron" and reason in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"workflow_name": "demo.countdown", "input": {"n": 1}, "cron": "61 * * * *"}, "invalid_cron"),
        ({"workflow_name": "demo.countdown", "input": {"n": 1}, "interval_seconds": 0}, "invalid_interval"),
        ({"workflow_name": "demo.countdown", "input": {"n": 1}, "interval_seconds": -5}, "invalid_interval"),
        ({"workflow_name": "demo.countdown", "input": {"n": 1}}, "invalid_schedule"),
        (
            {
                "workflow_name": "demo.countdown",
                "input": {"n": 1},
                "cron": "* * * * *",
                "interval_seconds": 60,
            },
            "invalid_schedule",
        ),
        ({"workflow_name": "no.such", "input": {}, "interval_seconds": 60}, "unknown_workflow"),
        ({"workflow_name": "demo.countdown", "input": {"n": -1}, "interval_seconds": 60}, "invalid_input"),
        ({"workflow_name": "demo.countdown", "input": [1], "interval_seconds": 60}, "invalid_input"),
        # What run_start refuses, refused when written (else every slot fails).
        (
            {
                "workflow_name": "demo.countdown",
                "input": {"n": 1, "budgets": {"steps": -1}},
                "interval_seconds": 60,
            },
            "invalid_budgets",
        ),
        (
            {
                "workflow_name": "demo.countdown",
                "input": {"n": 1, "budgets": {"turns": 3}},
                "interval_seconds": 60,
            },
            "invalid_budgets",
        ),
        (
            {"workflow_name": "demo.countdown", "input": {"n": 1}, "interval_seconds": 60, "overlap": "pile"},
            "invalid_overlap",
        ),
        ({"workflow_name": "langgraph", "input": {}, "interval_seconds": 60}, "workflow_not_schedulable"),
    ],
)
def test_bad_schedule_input_is_refused_with_a_reason_and_nothing_is_stored(tenant, kwargs, code):
    with pytest.raises((InvalidInput, UnknownWorkflow)) as caught:
        schedule_create(tenant=tenant, actor="t", **kwargs)
    assert caught.value.code == code
    assert not WorkflowSchedule.objects.exists()


def test_a_due_interval_schedule_starts_one_run_per_slot_keyed_by_the_slot(tenant):
    schedule = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0},
        interval_seconds=60,
        overlap="queue",
        now=T0,
    )
    assert schedule.next_fire_at == T0 + timedelta(seconds=60)
    assert schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=59)) == []  # not yet due
    [fired] = schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=61))
    assert fired.outcome == "started" and fired.slot == T0 + timedelta(seconds=60)
    run = AgentRun.objects.get(run_id=fired.run_id)
    assert run.idempotency_key == schedule_slot_key(schedule_id=schedule.schedule_id, slot=fired.slot)
    assert run.workflow_name == "demo.countdown" and run.state["n"] == 0
    assert schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=62)) == []  # that slot is done
    schedule.refresh_from_db()
    assert (schedule.next_fire_at, schedule.fired_count, schedule.last_run_id) == (
        T0 + timedelta(seconds=120),
        1,
        run.run_id,
    )


def test_after_downtime_only_the_latest_missed_slot_fires_once(tenant):
    schedule = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0},
        cron="*/5 * * * *",
        overlap="queue",
        now=T0,
    )
    fired = schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(hours=2, minutes=7))
    assert [(f.outcome, f.slot) for f in fired] == [("started", T0 + timedelta(hours=2, minutes=5))]
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + timedelta(hours=2, minutes=10)
    assert (
        AgentRun.objects.filter(idempotency_key__startswith=f"schedule:{schedule.schedule_id}:").count() == 1
    )


def test_overlap_skip_starts_nothing_while_the_previous_run_is_active_and_queue_starts_anyway(tenant):
    skip = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 2},
        interval_seconds=60,
        overlap="skip",
        now=T0,
    )
    queue = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 3},
        interval_seconds=60,
        overlap="queue",
        now=T0,
    )
    first = {f.schedule_id: f for f in schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=60))}
    assert {f.outcome for f in first.values()} == {"started"}
    second = {f.schedule_id: f for f in schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=120))}
    assert second[skip.schedule_id].outcome == "skipped"  # its first run has not moved yet
    assert second[queue.schedule_id].outcome == "started"
    assert _drive(first[skip.schedule_id].run_id).status == "completed"
    third = {f.schedule_id: f for f in schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=180))}
    assert third[skip.schedule_id].outcome == "started"
    skip.refresh_from_db()
    assert (skip.fired_count, skip.skipped_count, skip.last_skipped_slot) == (
        2,
        1,
        T0 + timedelta(seconds=120),
    )


def test_a_paused_schedule_does_not_fire_and_resumes_from_now_without_catching_up(tenant):
    schedule = schedule_create(
        tenant=tenant, actor="t", workflow_name="demo.countdown", input={"n": 0}, interval_seconds=60, now=T0
    )
    schedule_update(tenant=tenant, schedule_id=schedule.schedule_id, actor="t", enabled=False)
    assert schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(hours=1)) == []
    resumed = schedule_update(
        tenant=tenant, schedule_id=schedule.schedule_id, actor="t", enabled=True, now=T0 + timedelta(hours=1)
    )
    assert resumed.next_fire_at == T0 + timedelta(hours=1, seconds=60)


def test_a_slot_whose_run_cannot_start_is_recorded_and_the_schedule_moves_on(tenant):
    schedule = schedule_create(
        tenant=tenant, actor="t", workflow_name="demo.countdown", input={"n": 0}, interval_seconds=60, now=T0
    )
    WorkflowSchedule.objects.filter(pk=schedule.pk).update(input={"n": "many"})  # e.g. a rule that changed
    [fired] = schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=60))
    schedule.refresh_from_db()
    assert fired.outcome == "error" and "invalid_input" in schedule.last_error
    assert schedule.next_fire_at == T0 + timedelta(seconds=120) and schedule.fired_count == 0


def test_another_tenant_neither_sees_nor_fires_a_schedule(tenant, other_tenant):
    schedule_create(
        tenant=tenant, actor="t", workflow_name="demo.countdown", input={"n": 0}, interval_seconds=60, now=T0
    )
    with tenant_bind(other_tenant.tenant_id):
        assert not WorkflowSchedule.objects.exists()
    assert schedules_fire_tenant(tenant=other_tenant, now=T0 + timedelta(days=1)) == []


def test_erasing_a_subject_deletes_the_schedules_about_them(tenant):
    mine = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0, "customer": "cust-4711"},
        interval_seconds=60,
        now=T0,
    )
    theirs = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0},
        subject="cust-4711",
        interval_seconds=60,
    )
    other = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0, "customer": "cust-47110"},
        interval_seconds=60,
    )
    counts = SchedulesEraser().erase(
        scope=Scope(tenant_id=tenant.tenant_id, subject_id="cust-4711"),
        request_id=mine.schedule_id,
        subject_digest="d",
    )
    assert counts == {"schedules_deleted": 2}
    assert list(WorkflowSchedule.objects.values_list("schedule_id", flat=True)) == [other.schedule_id]
    assert theirs.schedule_id != other.schedule_id


def test_interval_slots_fall_on_whole_seconds_like_the_slot_in_the_runs_key(tenant):
    schedule = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0},
        interval_seconds=5,
        now=T0 + timedelta(microseconds=375_700),
    )
    assert schedule.next_fire_at == T0 + timedelta(seconds=5)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_schedule_another_beat_is_firing_is_skipped_not_fired_twice(tenant):
    schedule = schedule_create(
        tenant=tenant, actor="t", workflow_name="demo.countdown", input={"n": 0}, interval_seconds=60, now=T0
    )
    other_beat = connections["owner"]  # another connection that holds the row, as a beat mid-firing does
    with transaction.atomic(using="owner"), other_beat.cursor() as cursor:
        cursor.execute("SELECT 1 FROM workflow_schedules WHERE schedule_id = %s FOR UPDATE", [schedule.pk])
        assert schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=61)) == []
    [fired] = schedules_fire_tenant(tenant=tenant, now=T0 + timedelta(seconds=61))
    assert fired.outcome == "started"
    assert (
        AgentRun.objects.filter(idempotency_key__startswith=f"schedule:{schedule.schedule_id}:").count() == 1
    )


def test_an_erasure_deletes_the_subjects_schedules_and_its_receipt_finds_none_left(tenant):
    from erasure.services import erasure_execute, erasure_request_create

    about = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0, "customer": "cust-9c1d"},
        interval_seconds=60,
    )
    kept = schedule_create(
        tenant=tenant, actor="t", workflow_name="demo.countdown", input={"n": 0}, interval_seconds=60
    )
    request = erasure_request_create(tenant=tenant, subject_id="cust-9c1d", requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed", done.error
    places = {p["place"]: p for p in done.receipt["places"]}
    assert (
        places["workflow_schedules.input"]["before"] == 1 and places["workflow_schedules.input"]["after"] == 0
    )
    assert done.receipt["counts"]["schedules.schedules_deleted"] == 1
    assert list(WorkflowSchedule.objects.values_list("pk", flat=True)) == [kept.pk]
    assert about.pk != kept.pk
