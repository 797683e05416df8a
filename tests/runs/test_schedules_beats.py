"""Two beat processes and two worker processes fire one schedule in real time: one run per slot."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest

from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.schedules import schedule_create, schedule_update
from runs.kernel.models import AgentRun
from tests.processes import wait_until

# Each beat asks for a sweep three times a second; the schedule's slots are a second apart.
ENV = {"KEEPER_SCHEDULE_INTERVAL": "0.3"}


def _slot(key: str | None) -> datetime | None:
    return datetime.fromisoformat(key.split(":", 2)[2]) if key else None


@pytest.mark.slow
def test_two_beats_and_two_workers_start_exactly_one_run_per_slot(tenant, processes):
    for _ in range(2):
        processes.worker(pool="solo", env=ENV)
        processes.beat(ENV)
    schedule = schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="test.flaky",
        input={"fail_times": 0},
        interval_seconds=1,
        overlap="queue",
    )
    wait_until(
        lambda: WorkflowSchedule.objects.get(pk=schedule.pk).fired_count >= 6,
        timeout=120,
        message="six slots to fire",
    )
    # Pausing waits for a sweep that holds the row, so nothing fires after this line.
    schedule_update(tenant=tenant, schedule_id=schedule.schedule_id, actor="t", enabled=False)
    schedule.refresh_from_db()
    # Every run the schedule started, found by who started it (not by the key that should make it unique).
    runs = list(
        AgentRun.objects.filter(
            events__event_type="run_started", events__actor=f"schedule:{schedule.schedule_id}"
        )
    )
    slots = Counter(_slot(r.idempotency_key) for r in runs)
    assert len(runs) == schedule.fired_count >= 6
    assert all(n == 1 for n in slots.values()), slots
    ordered = sorted(s for s in slots if s is not None)
    gaps = {b - a for a, b in zip(ordered, ordered[1:], strict=False)}
    assert all(g >= timedelta(seconds=1) and g % timedelta(seconds=1) == timedelta(0) for g in gaps)
    assert ordered[-1] == schedule.last_slot
    wait_until(
        lambda: all(
            r.status == "completed" for r in AgentRun.objects.filter(run_id__in=[r.run_id for r in runs])
        ),
        timeout=120,
        message="the scheduled runs to complete",
    )
