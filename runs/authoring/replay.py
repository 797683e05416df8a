"""The replay check: would the code deployed now make the moves a recorded history made?

Given a history (`manage.py export_history`), every step the run committed is run again, by the
current code, on the state it was given then (the state of the event before it), with its operations,
approvals and signals answered from the history's own record: never a real side effect, no approval
asked, no signal waited for. Its outcome (the next step, or suspend with the reason and the step to
resume at, complete, fail with the code) is compared with the one recorded; the first that differs is
the divergence, with its seq. Waiting runs are checked too: the step a run waits at, or goes on to,
must still exist (an in-place rename strands it with `unknown_step`).

A step that reads the outside world directly (not through `ctx.operation`) cannot be re-run offline:
when it raises, it is listed as not re-run, and only the structural checks hold for it. Like Temporal's
replayer, this is meant for CI: `manage.py replay_check FILES...` or `assert_replays(...)` in a test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from django.db import transaction

from core.digests import json_digest
from core.errors import ApplicationError
from core.tenancy import tenant_bind
from runs.authoring._context import (
    SIGNAL,
    SIGNALS_KEY,
    ApprovalDecision,
    Context,
    Signal,
    Steps,
    _Suspension,
)
from runs.authoring._tools import OperationCall, OperationOutcome, Tool
from runs.engine.registry import (
    Complete,
    Fail,
    Next,
    State,
    StepContext,
    StepResult,
    Suspend,
    Workflow,
    registry,
)
from runs.operator.history import history_digest, history_import

# The tenant a step's past is imported into while it is replayed (inside a transaction rolled back).
REPLAY_TENANT = "keeper-replay-check"

# The events that record a step's outcome (their payload names the step and what it spent).
_OUTCOMES = (
    "step_completed",
    "assistant_message",
    "tool_call",
    "run_suspended",
    "run_completed",
    "run_failed",
)
_APPROVAL_WAITS = ("approval_required", "approval_expired", "approval_digest_mismatch")


@dataclass(frozen=True)
class Divergence:
    seq: int
    step: str
    message: str

    def __str__(self) -> str:
        return f"event {self.seq} (step {self.step!r}): {self.message}"


@dataclass
class ReplayReport:
    """What the check found for one history: `ok` when nothing diverged."""

    workflow: str
    version: str
    run_id: str
    replayed: list[int] = field(default_factory=list)
    not_rerun: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, step, why)
    divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def summary(self) -> str:
        head = f"{self.workflow} {self.version} run {self.run_id}"
        if self.divergence is not None:
            return f"{head}: DIVERGES at {self.divergence}"
        skipped = "".join(f"; event {seq} ({step}) not re-run: {why}" for seq, step, why in self.not_rerun)
        return f"{head}: replays ({len(self.replayed)} steps re-run){skipped}"


class _NotInRecord(Exception):
    """The step asked for something the history never recorded (another operation, another child)."""


class _OutsideWorld(Exception):
    """The step reached outside Keeper during the replay (which cannot be answered offline)."""


@dataclass
class _Recorded:
    """One step's moment in the history: what it may be answered with."""

    document: Mapping[str, Any]
    seq: int
    before: list[Mapping[str, Any]]  # the events before this step's outcome
    at: datetime


class _ReplayBase:
    """The engine's step context, as the replay gives it: the recorded identity, no lease."""

    def __init__(
        self, run_id: UUID, tenant_id: UUID, step: str, attempt: int, revision: int, recorded: _Recorded
    ):
        self.run_id, self.tenant_id, self.step = run_id, tenant_id, step
        self.attempt, self.revision, self.recorded = attempt, revision, recorded
        self.lease_lost = False

    def spend(self, *, tokens: int = 0, cost_usd: float = 0.0) -> None:
        """Usage is what the history recorded; the replay charges nothing."""

    def heartbeat(self) -> bool:
        return True

    def authoring_context(self, definition: Steps, state: State) -> Context:
        return _ReplayContext(cast(StepContext, self), definition, state)


class _ReplayContext(Context):
    """A step context that answers from the history: operations as recorded, approvals as decided
    before this step ran, signals received before it; nothing is sent, asked or waited for."""

    _base: _ReplayBase  # type: ignore[assignment]

    @property
    def actor(self) -> str:
        return "replay"

    @property
    def workspace(self) -> Any:
        raise _OutsideWorld("the run's workspace is not part of a history")

    def remember(self, **kwargs: Any) -> Any:
        raise _OutsideWorld("writing memory is a side effect")

    def operation(
        self,
        operation_id: str,
        *,
        tool: Tool,
        request: Mapping[str, Any],
        call: Callable[[OperationCall], Any],
    ) -> OperationOutcome:
        recorded = self._base.recorded
        ops = [o for o in recorded.document.get("operations") or [] if o.get("operation_id") == operation_id]
        if not ops:
            raise _NotInRecord(f"the step now makes operation {operation_id!r}, which the history never made")
        op = ops[-1]
        if op.get("request_digest") not in (None, json_digest(dict(request))):
            raise _NotInRecord(f"operation {operation_id!r} now sends another request than the recorded one")
        if op.get("tool_name") not in (None, tool.name):
            raise _NotInRecord(
                f"operation {operation_id!r} now uses tool {tool.name!r}, not {op['tool_name']!r}"
            )
        status = _status_at(op, recorded.at)
        if status is None:
            raise _NotInRecord(f"the step now makes operation {operation_id!r} before the history made it")
        if status == "succeeded":
            return OperationOutcome(operation_id, "succeeded", op.get("result"), op.get("external_ref"))
        if status == "failed":
            return OperationOutcome(operation_id, "failed", op.get("result"))
        raise _Suspension("reconciliation_required", f"operation {operation_id} was {status} then")

    def approval(
        self, request: Mapping[str, Any], *, reasons: Sequence[str] = (), auto_approve: str | None = None
    ) -> ApprovalDecision:
        digest = json_digest(dict(request))
        recorded = self._base.recorded
        approvals = {a.get("approval_id"): a for a in recorded.document.get("approvals") or []}
        for event in reversed(recorded.before):
            payload = event.get("payload") or {}
            if event["event_type"] in ("approval_approved", "approval_rejected") and (
                payload.get("request_digest") == digest
            ):
                decided = approvals.get(payload.get("approval_id")) or {}
                return ApprovalDecision(
                    approval_id=UUID(str(payload["approval_id"])),
                    approved=event["event_type"] == "approval_approved",
                    request_digest=digest,
                    decided_by=decided.get("decided_by") or event.get("actor"),
                    note=str(payload.get("note") or ""),
                )
        if auto_approve:
            for approval in approvals.values():
                if approval.get("request_digest") == digest and approval.get("status") == "approved":
                    return ApprovalDecision(
                        approval_id=UUID(str(approval["approval_id"])),
                        approved=True,
                        request_digest=digest,
                        decided_by=approval.get("decided_by"),
                        note=str(approval.get("note") or ""),
                    )
        raise _Suspension("approval_required", "no decision recorded before this step")

    def wait_signal(self, name: str, *, timeout: float | None = None) -> Signal:
        recorded = self._base.recorded
        seen = self._state.get(SIGNALS_KEY) or {}
        mine = isinstance(seen, dict) and seen.get("run_id") == str(self.run_id)
        cursor = dict(seen.get("cursor") or {}) if mine else {}
        deadlines = dict(seen.get("deadlines") or {}) if isinstance(seen, dict) else {}
        for event in recorded.before:
            payload = event.get("payload") or {}
            if (
                event["event_type"] == "signal_received"
                and payload.get("signal") == name
                and event["seq"] > int(cursor.get(name, 0))
            ):
                cursor[name] = event["seq"]
                deadlines.pop(name, None)
                self.engine_patch[SIGNALS_KEY] = self._signals_kept(cursor, deadlines)
                return Signal(name, payload.get("payload"), event["seq"])
        deadline = deadlines.get(name)
        if deadline is None and timeout is not None:
            deadline = (recorded.at + timedelta(seconds=timeout)).isoformat()
        if deadline is not None and datetime.fromisoformat(deadline) <= recorded.at:
            deadlines.pop(name, None)
            self.engine_patch[SIGNALS_KEY] = self._signals_kept(cursor, deadlines)
            return Signal(name, timed_out=True, deadline=deadline)
        raise _Suspension(SIGNAL, f"waiting for signal {name}")

    def start_child(self, workflow_name: str, **kwargs: Any) -> Any:
        raise _OutsideWorld("child runs are not part of a history")

    def wait_child(self, child: Any) -> Any:
        raise _OutsideWorld("child runs are not part of a history")


def _status_at(op: Mapping[str, Any], at: datetime) -> str | None:
    """The operation's status when the step's outcome was committed (its history is timed), so a
    step that found it in doubt then is answered so, though a person settled it later."""
    if not op.get("history"):
        return str(op.get("status"))
    moves = [h for h in op["history"] if isinstance(h, dict) and _time(h.get("at")) <= at]
    return str(moves[-1]["status"]) if moves else None


def _outcome_of(result: StepResult, step: str) -> tuple[str, str | None, str | None]:
    """(kind, where it goes, reason or code) of a step's result."""
    if isinstance(result, Next):
        return "next", result.step, None
    if isinstance(result, Suspend):
        return "suspend", result.step or step, result.reason
    if isinstance(result, Complete):
        return "complete", None, None
    if isinstance(result, Fail):
        return "fail", None, result.code
    return type(result).__name__, None, None


def _recorded_outcome(event: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    payload = event.get("payload") or {}
    kind = event["event_type"]
    if kind == "run_suspended":
        return "suspend", payload.get("resume_at") or event.get("next_step"), payload.get("reason")
    if kind == "run_completed":
        return "complete", None, None
    if kind == "run_failed":
        return "fail", None, payload.get("code")
    return "next", payload.get("next_step") or event.get("next_step"), None


def _same(replayed: tuple[str, str | None, str | None], recorded: tuple[str, str | None, str | None]) -> bool:
    if replayed[:2] != recorded[:2]:
        return False
    if replayed[0] == "suspend" and replayed[2] in _APPROVAL_WAITS:
        return recorded[2] in _APPROVAL_WAITS  # why a decision is awaited depends on what a person did
    return replayed[2] == recorded[2]


def _words(outcome: tuple[str, str | None, str | None]) -> str:
    kind, where, why = outcome
    if kind == "next":
        return f"go on to step {where!r}"
    if kind == "suspend":
        return f"suspend ({why}) to resume at {where!r}"
    if kind == "fail":
        return f"fail ({why})"
    return kind


def _time(value: Any) -> datetime:
    from django.utils import timezone

    return datetime.fromisoformat(value) if isinstance(value, str) else timezone.now()


def replay_check(document: Mapping[str, Any]) -> ReplayReport:
    """Re-run the history's steps with the workflows registered in this process; see the module."""
    run = document.get("run") or {}
    name, version = str(document.get("workflow")), str(document.get("workflow_version"))
    report = ReplayReport(name, version, str(run.get("run_id", "?")))
    events = list(document.get("events") or [])
    try:
        workflow = registry.get(name, version)
    except ApplicationError as exc:
        report.divergence = Divergence(events[0]["seq"] if events else 0, "", exc.message)
        return report
    state: State | None = None
    for index, event in enumerate(events):
        payload = event.get("payload") or {}
        step = event.get("step_id") or payload.get("step")
        waits_at = event.get("next_step")
        if waits_at and workflow.step(waits_at) is None:
            report.divergence = Divergence(
                event["seq"], step or "", f"the run goes on at step {waits_at!r}, which no longer exists"
            )
            return report
        if event["event_type"] in _OUTCOMES and step and "spent" in payload and state is not None:
            recorded = _Recorded(document, int(event["seq"]), events[:index], _time(event.get("created_at")))
            problem = _replay_step(workflow, report, event, recorded, state)
            if problem is not None:
                report.divergence = problem
                return report
        if event.get("state") is not None:
            state = event["state"]
    return report


def _before(document: Mapping[str, Any], seq: int, at: datetime) -> dict[str, Any]:
    """The history as it stood when the step of event `seq` ran: its events before, and what was
    recorded before then (operations, approvals, summaries, snapshots), as an importable document."""
    events = [e for e in document["events"] if e["seq"] < seq]
    last = events[-1]

    def earlier(rows: Any) -> list[Any]:
        return [r for r in rows or [] if _time(r.get("created_at")) < at]

    run = {**document["run"], "state_revision": len(events), "state": last.get("state"),
           "state_digest": last.get("state_digest"), "next_step": last.get("next_step"), "status": "running",
           "result": None, "suspend_reason": "", "suspend_detail": ""}  # fmt: skip
    past = {
        **document,
        "run": run,
        "events": events,
        "operations": earlier(document.get("operations")),
        "approvals": earlier(document.get("approvals")),
        "summaries": [x for x in document.get("summaries") or [] if int(x.get("covers_to_seq", seq)) < seq],
        "retrieval_snapshots": earlier(document.get("retrieval_snapshots")),
    }
    past["digest"] = history_digest(past)
    return past


def _replay_step(
    workflow: Workflow,
    report: ReplayReport,
    event: Mapping[str, Any],
    recorded: _Recorded,
    state: State,
) -> Divergence | None:
    """Run the step of `event` again, on the past it had imported into the database (what it reads
    of its own run: messages, operations) inside a transaction that is rolled back."""
    seq, step_name = int(event["seq"]), str(event.get("step_id") or event["payload"]["step"])
    step = workflow.step(step_name)
    if step is None:
        return Divergence(seq, step_name, f"step {step_name!r} ran here and no longer exists")
    try:
        with transaction.atomic():  # whatever the step writes is undone: a replay changes nothing
            past = history_import(
                document=_before(recorded.document, seq, recorded.at), tenant_slug=REPLAY_TENANT
            )
            tenant_id = _tenant_id(past.tenant)
            with tenant_bind(tenant_id):
                base = _ReplayBase(past.run_id, tenant_id, step_name,
                                   int(event.get("attempt") or 1), seq - 1, recorded)  # fmt: skip
                result = step.fn(base, json.loads(json.dumps(state)))  # type: ignore[arg-type]
            transaction.set_rollback(True)
    except _NotInRecord as exc:
        return Divergence(seq, step_name, str(exc))
    except Exception as exc:  # the step read the outside world directly (an HTTP read, a model)
        report.not_rerun.append((seq, step_name, f"{type(exc).__name__}: {str(exc)[:160]}"))
        return None
    replayed, expected = _outcome_of(result, step_name), _recorded_outcome(event)
    report.replayed.append(seq)
    if not _same(replayed, expected):
        return Divergence(
            seq, step_name, f"the code now would {_words(replayed)}; the history recorded: {_words(expected)}"
        )
    return None


def _tenant_id(slug: str) -> UUID:
    from core.models import Tenant

    return Tenant.objects.get(slug=slug).tenant_id


def replay_file(path: str | Path) -> ReplayReport:
    """replay_check on a history file written by `manage.py export_history`."""
    return replay_check(json.loads(Path(path).read_text()))
