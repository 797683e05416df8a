"""The built-in workflows' recorded histories (tests/histories/*.json) replay on the current code,
and the replay check catches an edit that would strand or redirect runs made with the old one.

The files are written by the kit's runs below: `RECORD_HISTORIES=1 pytest tests/authoring/test_histories.py -k is_recorded`
(orders and customers are the sandbox's fictional ones). Without the variable the same runs are made
and replayed, and the committed files are replayed as CI's check of the code against them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from runs.authoring import Context, State, StepResult, workflow
from runs.authoring.replay import replay_check
from runs.authoring.testing import assert_replays
from runs.workflows.refund.workflow import PAYMENTS_REFUND
from tests.runs.workflows.test_refund_workflow import Sandbox, sandbox  # noqa: F401 - the fixture

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
RECORDING = os.environ.get("RECORD_HISTORIES") == "1"


def _keep(name: str, document: dict[str, Any]) -> dict[str, Any]:
    """The history, replayed; written to tests/histories/<name>.json when recording."""
    assert_replays(document)
    if RECORDING:
        (HISTORIES / f"{name}.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return document


def _history(name: str) -> dict[str, Any]:
    return json.loads((HISTORIES / f"{name}.json").read_text())


def test_a_refund_approved_is_recorded_and_replays(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-h1")
    run = keeper_env.start("refund", {"order_id": "o-h1", "reason": "arrived broken"})
    keeper_env.approve(run, by="user:ana", note="photo checked")
    run.assert_completed()
    _keep("refund_approved", keeper_env.history(run))


def test_a_refund_rejected_is_recorded_and_replays(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-h2")
    run = keeper_env.start("refund", {"order_id": "o-h2", "reason": "changed my mind"})
    keeper_env.reject(run, by="user:ana", note="outside the return window")
    run.assert_completed()
    _keep("refund_rejected", keeper_env.history(run))


def test_a_refund_in_doubt_reconciled_is_recorded_and_replays(keeper_env, sandbox):  # noqa: F811
    sandbox.order("o-h4")
    sandbox.fault("drop_after_apply", remaining=1)
    sandbox.fault("lookup_non_authoritative", remaining=1)
    run = keeper_env.start("refund", {"order_id": "o-h4", "reason": "arrived broken"})
    keeper_env.approve(run, by="user:ana")
    run.assert_waiting("reconciliation_required", at="refund")
    keeper_env.resume(run, by="user:ana", note="the provider answers again")
    run.assert_completed()
    _keep("refund_in_doubt_reconciled", keeper_env.history(run))


def test_a_support_conversation_is_recorded_and_replays(keeper_env, sandbox, settings):  # noqa: F811
    # The agent reads the order over HTTP, outside any operation, when it runs and when it is replayed:
    # the sandbox fixture's 1 s timeout on a loaded machine would make the replay read "unavailable".
    settings.KEEPER_PAYMENTS_TIMEOUT = 10.0
    keeper_env.fake_tool(PAYMENTS_REFUND, result=lambda request, key: {"refund_id": "rf-h3", **request})
    sandbox.order("o-h3")
    run = keeper_env.start("support_agent", {}, subject="cust-h3")
    keeper_env.message(run, "Hello, where is o-h3?")
    keeper_env.message(run, "Please refund o-h3, it arrived broken")
    keeper_env.approve(run, by="user:ana")
    run.assert_waiting("awaiting_input")
    _keep("support_agent_conversation", keeper_env.history(run))


def test_a_countdown_is_recorded_and_replays(keeper_env):
    run = keeper_env.start("demo.countdown", {"n": 3})
    run.assert_completed()
    _keep("countdown", keeper_env.history(run))


@pytest.mark.parametrize(
    "name", ["refund_approved", "refund_rejected", "refund_in_doubt_reconciled", "countdown"]
)
def test_the_recorded_history_replays_on_the_current_code(name, db):
    report = replay_check(_history(name))
    assert report.ok, report.summary()
    assert report.replayed, "no step was re-run"


def test_the_recorded_conversation_replays_with_the_order_it_read(sandbox, settings):  # noqa: F811
    sandbox.order("o-h3")  # the agent reads the order over HTTP, outside any operation: it must answer
    settings.KEEPER_PAYMENTS_TIMEOUT = 10.0
    report = replay_check(_history("support_agent_conversation"))
    assert report.ok, report.summary()
    assert not report.not_rerun


def test_replaying_answers_the_refund_from_the_record_and_sends_nothing(db):
    history = _history("refund_approved")
    report = replay_check(history)
    steps = {event["seq"]: event["step_id"] for event in history["events"]}
    assert {steps[seq] for seq in report.replayed} == {"decide", "approve", "refund"}
    # The steps that read the payments API directly cannot be re-run without it: said, not guessed.
    assert {step for _, step, _ in report.not_rerun} == {"lookup_order", "verify"}


# --- edits that break waiting runs ---

renamed = workflow("test.refund_renamed", version="1")


@renamed.step
def lookup_order(ctx: Context, state: State) -> StepResult:
    return ctx.next(decide, state)


@renamed.step
def decide(ctx: Context, state: State) -> StepResult:
    return ctx.next(ask_for_approval, state)


@renamed.step
def ask_for_approval(ctx: Context, state: State) -> StepResult:  # was `approve`
    return ctx.complete(state)


renamed.register()

shortened = workflow("test.countdown_shortened", version="1")


@shortened.step
def start(ctx: Context, state: State) -> StepResult:
    return ctx.next(tick if state["n"] else finish, {**state, "remaining": state["n"], "ticks": []})


@shortened.step
def tick(ctx: Context, state: State) -> StepResult:
    return ctx.next(finish, {**state, "remaining": 0})  # the edit: one tick, whatever n was


@shortened.step
def finish(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"counted": state["n"]})


shortened.register()


def test_a_renamed_step_fails_the_check_at_the_first_event_that_ran_it(db):
    history = {**_history("refund_approved"), "workflow": "test.refund_renamed"}
    report = replay_check(history)
    assert not report.ok
    first = next(e for e in history["events"] if e.get("next_step") == "approve")
    assert report.divergence is not None and report.divergence.seq == first["seq"]
    assert "'approve'" in report.divergence.message and "no longer exists" in report.divergence.message


def test_a_changed_next_step_fails_the_check_at_the_step_that_now_goes_elsewhere(db):
    history = {**_history("countdown"), "workflow": "test.countdown_shortened"}
    report = replay_check(history)
    assert not report.ok and report.divergence is not None
    first_tick = next(e for e in history["events"] if e.get("step_id") == "tick")
    assert (report.divergence.seq, report.divergence.step) == (first_tick["seq"], "tick")
    assert "'finish'" in report.divergence.message and "'tick'" in report.divergence.message


def test_the_command_exits_non_zero_and_names_the_divergence(db, tmp_path):
    from django.core.management import CommandError, call_command

    edited = tmp_path / "countdown_edited.json"
    edited.write_text(json.dumps({**_history("countdown"), "workflow": "test.countdown_shortened"}))
    with pytest.raises(CommandError) as failed:
        call_command("replay_check", str(HISTORIES / "countdown.json"), str(edited))
    assert "1 of 2 histories diverge" in str(failed.value)
