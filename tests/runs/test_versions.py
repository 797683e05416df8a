"""Two live versions: a run finishes on the version it started on while new runs start on the newest,
and the drain view says when an old version can be removed."""

from __future__ import annotations

import importlib

import pytest

from runs.authoring import Context, State, StepResult, workflow
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.engine.versions import workflow_versions
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

MODULES_V1 = "tests.workflows,tests.runs.version_flows_v1"
MODULES_V2 = "tests.workflows,tests.runs.version_flows_v2"


def _pinned(version: str) -> None:
    wf = workflow("test.pinned", version=version)

    @wf.step
    def begin(ctx: Context, state: State) -> StepResult:
        return ctx.next(end, {**state, "began_on": version})

    @wf.step
    def end(ctx: Context, state: State) -> StepResult:
        return ctx.complete(state, {"began_on": state["began_on"], "ended_on": version})

    wf.register()


def _drive(run_id) -> AgentRun:
    for _ in range(20):
        if run_advance(run_id=run_id, worker_id="w-test").outcome != "committed":
            break
    return AgentRun.objects.get(run_id=run_id)


def _row(name: str, version: str):
    [workflow_row] = [w for w in workflow_versions() if w.name == name]
    return next(v for v in workflow_row.versions if v.version == version)


def test_a_run_takes_its_next_steps_from_its_own_version_after_a_newer_one_is_registered(tenant):
    _pinned("1.9")
    old = run_start(tenant=tenant, workflow_name="test.pinned", input={}, actor="t").run
    assert old.workflow_version == "1.9"
    assert run_advance(run_id=old.run_id, worker_id="w-test").outcome == "committed"  # begin, on 1.9
    _pinned("1.10")  # the newer version (PEP 440 order, not string order)
    new = run_start(tenant=tenant, workflow_name="test.pinned", input={}, actor="t").run
    assert new.workflow_version == "1.10"
    assert _drive(old.run_id).result == {"began_on": "1.9", "ended_on": "1.9"}
    assert _drive(new.run_id).result == {"began_on": "1.10", "ended_on": "1.10"}


def test_the_drain_view_holds_an_old_version_while_a_run_is_pinned_to_it_then_says_safe(tenant):
    _pinned("3.0")
    old = run_start(tenant=tenant, workflow_name="test.pinned", input={}, actor="t").run
    _pinned("3.1")
    held = _row("test.pinned", "3.0")
    assert (held.runs, held.safe_to_remove, held.holding_run_ids) == (
        {"running": 1},
        False,
        (str(old.run_id),),
    )
    assert held.drain == "held by 1 running run(s)"
    newest = _row("test.pinned", "3.1")
    assert newest.newest and not newest.safe_to_remove and newest.drain.startswith("newest")
    _drive(old.run_id)
    drained = _row("test.pinned", "3.0")
    assert (drained.runs, drained.safe_to_remove, drained.drain) == ({"completed": 1}, True, "safe to remove")


def test_a_version_whose_code_is_gone_but_still_holds_runs_says_they_cannot_continue(tenant):
    _pinned("5")
    run = run_start(tenant=tenant, workflow_name="test.pinned", input={}, actor="t").run
    AgentRun.objects.filter(run_id=run.run_id).update(workflow_version="4")  # deployed before, not now
    row = _row("test.pinned", "4")
    assert not row.registered and "cannot continue" in row.drain


@pytest.mark.slow
def test_a_v1_run_finishes_on_v1_in_a_worker_that_has_v2_and_new_runs_start_on_v2(tenant, processes):
    importlib.import_module("tests.runs.version_flows_v1")
    worker = processes.worker(pool="solo", env={"KEEPER_WORKFLOW_MODULES": MODULES_V1})
    processes.beat({"KEEPER_WORKFLOW_MODULES": MODULES_V1})
    old = run_start(
        tenant=tenant, workflow_name="test.deploy", workflow_version="1", input={"seconds": 4}, actor="t"
    ).run
    wait_until(
        lambda: AgentRun.objects.get(run_id=old.run_id).suspend_reason == "timer",
        timeout=60,
        message="the v1 run to sleep in its first step",
    )
    # Deploy version 2: the v1 worker goes, a worker with both versions comes.
    processes.kill(worker)
    importlib.import_module("tests.runs.version_flows_v2")
    processes.worker(pool="solo", env={"KEEPER_WORKFLOW_MODULES": MODULES_V2})
    new = run_start(tenant=tenant, workflow_name="test.deploy", input={"seconds": 0}, actor="t").run
    assert new.workflow_version == "2"
    assert _row("test.deploy", "1").drain == "held by 1 suspended run(s)"
    wait_until(
        lambda: AgentRun.objects.filter(run_id__in=[old.run_id, new.run_id], status="completed").count() == 2,
        timeout=120,
        message="both runs to complete",
    )
    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.workflow_version, old.result) == ("1", {"finished_by": "v1"})
    assert (new.workflow_version, new.result) == ("2", {"finished_by": "v2", "checked": True})
    # The v1 run woke in the v2 worker and took v1's step after its sleep, never v2's `check`.
    assert not AgentEvent.objects.filter(run_id=old.run_id, step_id="check").exists()
    assert AgentEvent.objects.filter(run_id=new.run_id, step_id="check").exists()
    assert _row("test.deploy", "1").drain == "safe to remove"
