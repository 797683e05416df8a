"""Reading replays beside their originals: the moves, the final state's differences, tokens and cost,
where they first diverged; a round's table of outcomes; the sets. Every query names the tenant.

The moves are what a run did after the fork point: each step that moved on (`step_completed`), each
reply (`assistant_message`, compared by its text) and the ending (`run_completed`, `run_failed`).
Waiting is not a move (a replay answers an approval from the original's record instead of waiting),
and the customer's messages are the same input on both sides by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any
from uuid import UUID

from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay
from runs.kernel.models import AgentEvent, AgentRun, RunStatus

AWAITING_INPUT = "awaiting_input"
FED_PREFIX = "replay:"  # client_message_id of a message a replay was fed: replay:<the original's seq>
MOVE_EVENTS = ("step_completed", "assistant_message", "run_completed", "run_failed")
MAX_DIFFS = 50
# The state's own bookkeeping differs between any two runs (wall time spent); tokens and cost are
# compared on their own.
STATE_IGNORED = ("budgets",)


@dataclass(frozen=True)
class Move:
    seq: int
    event_type: str
    step_id: str | None
    text: str = ""

    @property
    def key(self) -> tuple[str, str | None, str]:
        return (self.event_type, self.step_id, self.text)

    def label(self) -> str:
        if self.event_type == "assistant_message":
            return f"reply: {self.text[:300]}"
        if self.event_type == "step_completed":
            return str(self.step_id)
        return self.event_type


@dataclass
class Side:
    run_id: UUID
    status: str
    suspend_reason: str | None
    moves: list[Move]
    tokens: int
    cost_usd: float
    context_tokens: int
    state: dict[str, Any]
    resume_requested: bool = False

    @property
    def outcome(self) -> str:
        return f"{self.status}: {self.suspend_reason}" if self.suspend_reason else self.status


@dataclass
class Comparison:
    replay_run_id: UUID
    original_run_id: UUID
    at_seq: int
    original: Side
    replay: Side
    diverged_at: int | None  # the index of the first move that differs (None: the same moves)
    state_diff: list[dict[str, Any]] = field(default_factory=list)

    unfed: int = 0  # the original's customer messages the replay has not been given yet

    @property
    def settled(self) -> bool:
        """The replay stopped moving: finished, or suspended with nobody asked to resume it and no
        message of the original's left to feed it (it is fed right after it waits for one)."""
        waiting_for_feed = self.replay.suspend_reason == AWAITING_INPUT and self.unfed > 0
        return (
            self.replay.status != RunStatus.RUNNING
            and not self.replay.resume_requested
            and not waiting_for_feed
        )

    @property
    def pairs(self) -> list[tuple[Move | None, Move | None]]:
        """The moves side by side, the shorter side padded with None."""
        return list(zip_longest(self.original.moves, self.replay.moves))

    @property
    def same_moves(self) -> bool:
        return self.diverged_at is None

    @property
    def diverged_seq(self) -> dict[str, int | None]:
        """Where they first differ: the seq of the differing move on each side (None where a side
        has no move there)."""
        if self.diverged_at is None:
            return {"original": None, "replay": None}
        i = self.diverged_at
        o, r = self.original.moves, self.replay.moves
        return {"original": o[i].seq if i < len(o) else None, "replay": r[i].seq if i < len(r) else None}

    def as_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            return {
                "run_id": str(s.run_id),
                "outcome": s.outcome,
                "status": s.status,
                "suspend_reason": s.suspend_reason,
                "moves": [{"seq": m.seq, "move": m.label()} for m in s.moves],
                "tokens": s.tokens,
                "cost_usd": s.cost_usd,
                "context_tokens": s.context_tokens,
            }

        return {
            "replay_run_id": str(self.replay_run_id),
            "original_run_id": str(self.original_run_id),
            "at_seq": self.at_seq,
            "settled": self.settled,
            "same_moves": self.same_moves,
            "same_outcome": self.original.outcome == self.replay.outcome,
            "diverged_at_seq": self.diverged_seq,
            "state_diff": self.state_diff,
            "original": side(self.original),
            "replay": side(self.replay),
        }


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The paths where two states differ: changed, only in the original (removed), only in the replay (added)."""
    a = _flat({k: v for k, v in before.items() if k not in STATE_IGNORED})
    b = _flat({k: v for k, v in after.items() if k not in STATE_IGNORED})
    diffs: list[dict[str, Any]] = []
    for path in sorted(set(a) | set(b)):
        if path in a and path in b and a[path] == b[path]:
            continue
        kind = "changed" if path in a and path in b else ("removed" if path in a else "added")
        diffs.append({"path": path, "kind": kind, "original": a.get(path), "replay": b.get(path)})
    return diffs[:MAX_DIFFS]


def _side(run: AgentRun, events: list[AgentEvent]) -> Side:
    moves: list[Move] = []
    tokens, cost, context = 0, 0.0, 0
    for e in events:
        payload = e.payload or {}
        raw = payload.get("spent")
        spent: dict[str, Any] = raw if isinstance(raw, dict) else {}
        tokens += int(spent.get("tokens") or 0)
        cost += float(spent.get("cost_usd") or 0.0)
        parts = payload.get("context_tokens")
        if isinstance(parts, dict):
            context += sum(int(v) for v in parts.values() if isinstance(v, int | float))
        if e.event_type in MOVE_EVENTS:
            text = str(payload.get("content", "")) if e.event_type == "assistant_message" else ""
            moves.append(Move(e.seq, e.event_type, e.step_id, text))
    return Side(
        run.run_id,
        run.status,
        run.suspend_reason,
        moves,
        tokens,
        round(cost, 6),
        context,
        dict(run.state or {}),
        resume_requested=run.status == RunStatus.SUSPENDED and run.resume_requested_at is not None,
    )


_READS = 5
_Read = tuple[AgentRun, AgentRun, list[AgentEvent], list[AgentEvent]]


def _read(replay: RunReplay) -> _Read | None:
    """The original and the replay with their events from the fork point on; None if either is gone."""
    tenant_id = replay.tenant_id
    runs = {
        r.run_id: r
        for r in AgentRun.objects.filter(
            tenant_id=tenant_id, run_id__in=[replay.run_id, replay.original_run_id]
        )
    }
    original, copy = runs.get(replay.original_run_id), runs.get(replay.run_id)
    if original is None or copy is None:
        return None
    theirs = list(
        AgentEvent.objects.filter(
            tenant_id=tenant_id, run_id=original.run_id, seq__gt=replay.at_seq
        ).order_by("seq")
    )
    ours = list(AgentEvent.objects.filter(tenant_id=tenant_id, run_id=copy.run_id, seq__gt=1).order_by("seq"))
    return original, copy, theirs, ours


def _moved(run: AgentRun, events: list[AgentEvent]) -> bool:
    """Whether the run moved after it was read and before its events were."""
    return bool(events) and events[-1].seq > run.state_revision


def replay_compare(*, replay: RunReplay) -> Comparison | None:
    """The replay beside its original from the fork point on; None if either run is gone."""
    # The runs and then their events, one statement after the other while a worker may move them: a
    # replay fed its next message between the two reads would look settled (its run not yet asked to
    # resume, its events already fed). Every move writes the event whose seq is the run's new
    # revision, so an event past the revision read means the run moved between them: read again.
    read = _read(replay)
    for _ in range(_READS - 1):
        if read is None or not (_moved(read[0], read[2]) or _moved(read[1], read[3])):
            break
        read = _read(replay)
    if read is None:
        return None
    original, copy, theirs, copied = read
    # Not the conversation copied up to the fork point.
    ours = [e for e in copied if "forked_from" not in (e.payload or {})]
    a, b = _side(original, theirs), _side(copy, ours)
    said = sum(1 for e in theirs if e.event_type == "user_message" and (e.payload or {}).get("content"))
    fed = sum(1 for e in ours if (e.client_message_id or "").startswith(FED_PREFIX))
    diverged = next(
        (i for i, (x, y) in enumerate(zip(a.moves, b.moves, strict=False)) if x.key != y.key),
        None if len(a.moves) == len(b.moves) else min(len(a.moves), len(b.moves)),
    )
    return Comparison(
        copy.run_id,
        original.run_id,
        int(replay.at_seq),
        a,
        b,
        diverged,
        state_diff(a.state, b.state),
        unfed=max(said - fed, 0),
    )


def replays_of_round(*, eval_round: EvalRound) -> list[RunReplay]:
    return list(
        RunReplay.objects.filter(tenant_id=eval_round.tenant_id, eval_round=eval_round).order_by("created_at")
    )


@dataclass
class RoundTable:
    eval_round: EvalRound
    rows: list[Comparison]
    missing: int  # replays whose run (or original) is gone

    @property
    def settled(self) -> bool:
        return all(c.settled for c in self.rows)

    def totals(self) -> dict[str, Any]:
        rows = self.rows
        return {
            "replays": len(rows),
            "settled": sum(c.settled for c in rows),
            "same_outcome": sum(c.original.outcome == c.replay.outcome for c in rows),
            "same_moves": sum(c.same_moves for c in rows),
            "tokens_original": sum(c.original.tokens for c in rows),
            "tokens_replay": sum(c.replay.tokens for c in rows),
            "cost_usd_original": round(sum(c.original.cost_usd for c in rows), 6),
            "cost_usd_replay": round(sum(c.replay.cost_usd for c in rows), 6),
            "context_tokens_original": sum(c.original.context_tokens for c in rows),
            "context_tokens_replay": sum(c.replay.context_tokens for c in rows),
            "missing": self.missing,
        }

    def as_dict(self) -> dict[str, Any]:
        r = self.eval_round
        return {
            "round_id": str(r.round_id),
            "set_id": str(r.eval_set_id) if r.eval_set_id else None,
            "label": r.label,
            "overrides": r.overrides,
            "started_by": r.started_by,
            "created_at": r.created_at.isoformat(),
            "settled": self.settled,
            "totals": self.totals(),
            "rows": [c.as_dict() for c in self.rows],
        }


def round_table(*, eval_round: EvalRound) -> RoundTable:
    rows: list[Comparison] = []
    missing = 0
    for replay in replays_of_round(eval_round=eval_round):
        compared = replay_compare(replay=replay)
        if compared is None:
            missing += 1
        else:
            rows.append(compared)
    return RoundTable(eval_round, rows, missing)


def round_get(*, tenant_ids: list[UUID], round_id: UUID) -> EvalRound | None:
    return (
        EvalRound.objects.filter(tenant_id__in=tenant_ids, round_id=round_id)
        .select_related("eval_set")
        .first()
    )


def rounds_recent(
    *, tenant_ids: list[UUID], eval_set: EvalSet | None = None, limit: int = 20
) -> list[EvalRound]:
    found = EvalRound.objects.filter(tenant_id__in=tenant_ids)
    if eval_set is not None:
        found = found.filter(eval_set=eval_set)
    return list(found.select_related("eval_set").order_by("-created_at")[:limit])


def eval_sets_list(*, tenant_ids: list[UUID]) -> list[EvalSet]:
    return list(EvalSet.objects.filter(tenant_id__in=tenant_ids).select_related("tenant").order_by("name"))


def eval_set_members(*, eval_set: EvalSet) -> list[EvalSetRun]:
    return list(EvalSetRun.objects.filter(tenant_id=eval_set.tenant_id, eval_set=eval_set))


def replay_of(*, tenant_ids: list[UUID], run_id: UUID) -> RunReplay | None:
    return RunReplay.objects.filter(tenant_id__in=tenant_ids, run_id=run_id).first()
