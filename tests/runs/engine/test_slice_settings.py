"""KEEPER_SLICE_STEPS and KEEPER_SLICE_MS, read from a real worker's environment, set how many of a
run's steps one lease runs: a 22-step countdown takes one lease per slice."""

from __future__ import annotations

import pytest

from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("env", "leases"),
    [
        ({"KEEPER_SLICE_MS": "600000"}, 1),  # the default 100 steps: the whole run in one slice
        ({"KEEPER_SLICE_STEPS": "5", "KEEPER_SLICE_MS": "600000"}, 5),  # 22 steps, 5 a slice
        ({"KEEPER_SLICE_MS": "0"}, 22),  # no time left after any step: one step a slice
    ],
    ids=["default-steps", "steps-5", "ms-0"],
)
def test_the_slice_settings_from_the_environment_set_the_steps_per_lease(tenant, processes, env, leases):
    processes.worker(pool="solo", env=env)
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 20}, actor="test").run
    wait_until(
        lambda: AgentRun.objects.get(run_id=run.run_id).status == "completed",
        timeout=90,
        message="the countdown to complete",
    )
    run.refresh_from_db()
    assert run.lease_epoch == leases
    steps = AgentEvent.objects.filter(run=run, event_type__in=["step_completed", "run_completed"])
    assert steps.count() == 22 and set(steps.values_list("attempt", flat=True)) == {1}
