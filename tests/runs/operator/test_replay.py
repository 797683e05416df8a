"""Stored histories replay against the current code in CI, so a change that would strand runs fails."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from runs.engine.registry import Step, registry
from runs.operator.replay import replay_history, replay_problems

HISTORIES = sorted((Path(__file__).parent.parent / "fixtures" / "histories").glob("*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_every_stored_history_replays_against_the_current_code(path: Path):
    history = json.loads(path.read_text())
    assert history["events"], "an empty fixture proves nothing"
    assert (
        replay_history(
            workflow_name=history["workflow"],
            workflow_version=history["workflow_version"],
            events=history["events"],
        )
        == []
    )


def _history(name: str) -> dict:
    return json.loads((Path(__file__).parent.parent / "fixtures" / "histories" / f"{name}.json").read_text())


def test_renaming_a_step_that_histories_ran_is_caught():
    refund = registry.get("refund", "1")
    renamed = dataclasses.replace(
        refund, steps=tuple(Step("pay" if s.name == "refund" else s.name, s.fn) for s in refund.steps)
    )
    problems = replay_problems(workflow=renamed, events=_history("refund_approved_by_person")["events"])
    assert any("'refund' no longer exists" in p for p in problems)


def test_a_state_the_schema_no_longer_accepts_is_caught():
    events = copy.deepcopy(_history("refund_approved_by_person")["events"])
    with_request = next(e for e in events if e["state"] and "refund_request" in e["state"])
    with_request["state"]["refund_request"]["amount_minor"] = "25.00"  # the shape of another version
    problems = replay_problems(workflow=registry.get("refund", "1"), events=events)
    assert any(f"event {with_request['seq']}: state" in p for p in problems)


def test_a_history_from_an_unknown_version_is_caught():
    history = _history("refund_denied_not_delivered")
    assert replay_history(workflow_name="refund", workflow_version="9", events=history["events"]) != []
