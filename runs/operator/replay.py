"""Replaying stored histories against the current code (like Temporal's replayer), without side effects.

A history is the list of a run's events. Replay checks what a deploy could break for runs in
flight: every step the history ran still exists, under the same workflow version, every next step
exists, and every stored state still migrates to the current schema and validates.
"""

from __future__ import annotations

from typing import Any

from core.errors import ApplicationError
from core.tenancy import tenant_of_call
from runs.engine.registry import Workflow, registry
from runs.kernel.models import AgentEvent

STEP_EVENTS = ("step_completed", "step_error", "run_completed", "run_failed", "assistant_message")


def replay_history(*, workflow_name: str, workflow_version: str, events: list[dict[str, Any]]) -> list[str]:
    """Replay against the workflow registered in this process; [] if the history replays."""
    try:
        workflow = registry.get(workflow_name, workflow_version)
    except ApplicationError as exc:
        return [exc.message]
    return replay_problems(workflow=workflow, events=events)


def replay_problems(*, workflow: Workflow, events: list[dict[str, Any]]) -> list[str]:
    """Everything in this history the given code could not continue from."""
    problems: list[str] = []
    version = _initial_schema_version(events, workflow)
    for event in events:
        seq, event_type = event["seq"], event["event_type"]
        if event_type == "state_migrated":
            version = int(event["payload"]["to_version"])
        if event_type in STEP_EVENTS and event.get("step_id") is not None:
            if workflow.step(event["step_id"]) is None:
                problems.append(f"event {seq}: step {event['step_id']!r} no longer exists")
            recorded = (event.get("payload") or {}).get("workflow_version")
            if recorded not in (None, workflow.version):
                problems.append(
                    f"event {seq}: ran under workflow version {recorded}, replayed by {workflow.version}"
                )
        next_step = event.get("next_step")
        if next_step is not None and workflow.step(next_step) is None:
            problems.append(f"event {seq}: next step {next_step!r} no longer exists")
        if event.get("state") is not None and workflow.schemas is not None:
            try:
                workflow.schemas.migrate(event["state"], version)
            except ApplicationError as exc:
                problems.append(f"event {seq}: state (schema {version}) does not migrate: {exc.message}")
    return problems


def _initial_schema_version(events: list[dict[str, Any]], workflow: Workflow) -> int:
    first = (events[0].get("payload") or {}) if events else {}
    return int(first.get("state_schema_version") or workflow.state_schema_version)


@tenant_of_call
def history_export(*, run_id: Any) -> list[dict[str, Any]]:
    return [
        {
            "seq": e.seq,
            "event_type": e.event_type,
            "step_id": e.step_id,
            "attempt": e.attempt,
            "payload": e.payload,
            "actor": e.actor,
            "state_digest": e.state_digest,
            "state": e.state,
            "next_step": e.next_step,
        }
        for e in AgentEvent.objects.filter(run_id=run_id).order_by("seq")
    ]
