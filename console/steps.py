"""A run's step executions, read from its events: each step's bar on the timeline and its row on the
run page (input state digest, output, duration, attempt, error, the operation it performed), and the
run's waits (suspensions until the next event). Reads only; the newest executions when there are many."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.utils import timezone

from console.display import json_diff
from console.timeline import StepBar, Wait, duration_text
from runs.engine.selectors import event_states
from runs.kernel.models import AgentEvent, AgentRun, RunStatus, ToolOperation

# The events a step's execution commits (its outcome); a suspension without a step is a person's.
STEP_EVENT_TYPES = (
    "step_completed",
    "assistant_message",
    "tool_call",
    "step_error",
    "run_suspended",
    "run_completed",
    "run_failed",
)
SCAN_WINDOW = 4  # events read per step execution wanted, before reading the whole run

OUTCOME = {
    "step_error": "error",
    "run_suspended": "suspended",
    "run_completed": "completed",
    "run_failed": "failed",
}


@dataclass
class StepRow:
    """One execution of a step, for the run page's steps table."""

    bar: StepBar
    event_type: str
    input_digest: str  # the state digest the step started from (its previous event's)
    output: str  # "→ next step", "suspended: reason", "completed", "failed: code", "retry in 2 s"
    error: str
    wall_s: float | None
    operations: list[ToolOperation] = field(default_factory=list)

    @property
    def duration(self) -> str:
        return duration_text(self.wall_s) if self.wall_s is not None else ""


@dataclass
class RunSteps:
    rows: list[StepRow]  # seq order
    waits: list[Wait]
    more: bool  # there are older step executions than these

    @property
    def bars(self) -> list[StepBar]:
        return [row.bar for row in self.rows]


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _shifted(at: datetime, seconds: float) -> datetime:
    """`at` moved by `seconds`, or `at` itself when that lies outside the calendar (a worker's figure
    stored before it was bounded)."""
    try:
        return at + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        return at


def run_steps(*, run: AgentRun, limit: int, now: datetime | None = None) -> RunSteps:
    """The newest `limit` step executions and suspensions of the run (three indexed queries)."""
    now = now or timezone.now()

    def read(after_seq: int) -> list[Any]:
        return list(
            AgentEvent.objects.filter(
                tenant_id=run.tenant_id, run_id=run.run_id, seq__gt=after_seq, event_type__in=STEP_EVENT_TYPES
            )
            .annotate(
                wall_s=KT("payload__spent__wall_s"),
                retry_in_s=KT("payload__retry_in_s"),
                reason=Coalesce(KT("payload__reason"), KT("payload__suspend_reason")),  # a step's, a person's
                error_type=KT("payload__error_type"),
                message=KT("payload__message"),
                said_next=KT("payload__next_step"),
                code=KT("payload__code"),
            )
            .order_by("-seq")
            .values_list(
                "seq",
                "event_type",
                "created_at",
                "step_id",
                "attempt",
                "wall_s",
                "retry_in_s",
                "reason",
                "error_type",
                "message",
                "said_next",
                "code",
                "next_step",
            )[: limit + 1]
        )

    # The newest events first, in a window of seqs that holds them in a run made of steps (the
    # planner would otherwise read and decode every event of a long run to keep the newest few).
    window = run.state_revision - SCAN_WINDOW * max(limit, 1)
    rows = read(window) if window > 0 else []
    if len(rows) <= limit:  # fewer step events than that in the window: read the whole run
        rows = read(0)
    more = len(rows) > limit  # not counted: a count of a long run's older steps costs more than the rest
    rows = rows[:limit]
    rows.reverse()
    around = {seq - 1 for seq, *_ in rows} | {r[0] + 1 for r in rows if r[1] == "run_suspended"}
    neighbours = {
        seq: (at, digest)
        for seq, at, digest in AgentEvent.objects.filter(
            tenant_id=run.tenant_id, run_id=run.run_id, seq__in=around
        ).values_list("seq", "created_at", "state_digest")
    }
    operations: dict[str, list[ToolOperation]] = {}
    for op in ToolOperation.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id).order_by("created_at"):
        operations.setdefault(op.step_id, []).append(op)

    steps: list[StepRow] = []
    waits: list[Wait] = []
    for (
        seq,
        kind,
        at,
        step_id,
        attempt,
        wall,
        retry,
        reason,
        error_type,
        message,
        said_next,
        code,
        nxt,
    ) in rows:
        if kind == "run_suspended":
            following = neighbours.get(seq + 1)
            if following is not None:
                waits.append(Wait(seq=seq, start=at, end=following[0], reason=str(reason or "")))
            elif run.status == RunStatus.SUSPENDED:
                waits.append(
                    Wait(seq=seq, start=at, end=max(now, at), reason=str(reason or ""), ongoing=True)
                )
        wall_s = _float(wall)
        if not step_id or wall_s is None:  # a person's suspension, or no step ran (no time spent)
            continue
        outcome = OUTCOME.get(kind, "completed")
        error = f"{error_type}: {message}" if error_type else ""
        retry_s = _float(retry)
        if kind == "step_error":
            output = f"retry in {retry_s:g} s" if retry_s is not None else "suspended: step_error"
        elif kind == "run_suspended":
            output = f"suspended: {reason or ''}"
        elif kind == "run_failed":
            output = f"failed: {code or reason or ''}"
        elif kind == "run_completed":
            output = "completed"
        else:
            output = f"→ {said_next or nxt or ''}"
        bar = StepBar(
            seq=seq,
            step_id=step_id,
            attempt=attempt or 1,
            start=_shifted(at, -wall_s),
            end=at,
            outcome=outcome,
            detail=error or (str(reason or "") if kind == "run_suspended" else ""),
            retry_until=_shifted(at, retry_s) if retry_s is not None and kind == "step_error" else None,
        )
        previous = neighbours.get(seq - 1)
        steps.append(
            StepRow(
                bar=bar,
                event_type=kind,
                input_digest=previous[1] if previous else "",
                output=output,
                error=error,
                wall_s=wall_s,
                operations=operations.get(step_id, []),
            )
        )
    # A retry wait ends when the next attempt starts, if that came sooner or later than planned.
    for index, row in enumerate(steps[:-1]):
        if row.bar.retry_until is not None:
            row.bar = replace(row.bar, retry_until=steps[index + 1].bar.start)
    return RunSteps(rows=steps, waits=waits, more=more)


MAX_CHANGES_SHOWN = 6  # changed paths listed under one step's output


def step_changes(*, run: AgentRun, rows: list[StepRow]) -> dict[int, list[str]]:
    """What each step changed in the state (its real output): "$.remaining: 3 → 2" per changed path,
    from the states stored at the step's event and the one before it (a step whose states are not
    both stored shows none)."""
    seqs = {row.bar.seq for row in rows} | {row.bar.seq - 1 for row in rows}
    states = event_states(run=run, seqs=sorted(seqs))
    changes: dict[int, list[str]] = {}
    for row in rows:
        before, after = states.get(row.bar.seq - 1), states.get(row.bar.seq)
        if before is None or after is None:
            continue
        entries, cut = json_diff(before, after, limit=MAX_CHANGES_SHOWN)
        shown = [
            f"{e.path}: {e.old} → {e.new}"
            if e.change == "changed"
            else f"{e.path} {e.change}: {e.new or e.old}"
            for e in entries
            if not e.path.startswith(("$.budgets", "$.signals_seen"))
        ]
        changes[row.bar.seq] = [*shown, "…"] if cut else shown
    return changes
