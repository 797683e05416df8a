"""Reads of one run's history: pages of events, activity per time slice, marked events, the state at
a revision. Each reads only what it shows (indexed ranges, SQL aggregates), never a whole big run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.fields.json import KT

from core.digests import json_digest
from core.errors import InvalidInput
from core.pagination import KeysetPage, keyset_page
from core.tenancy import tenant_bound, tenant_of_call
from runs.kernel.models import AgentEvent, AgentRun


@tenant_of_call
def run_events(*, run_id: UUID, after_seq: int = 0, limit: int = 100) -> list[AgentEvent]:
    events = AgentEvent.objects.filter(tenant_id=tenant_bound(), run_id=run_id, seq__gt=after_seq)
    return list(events.order_by("seq")[:limit])


def event_page(*, run: AgentRun, after_seq: int, limit: int) -> KeysetPage[AgentEvent]:
    """Events after `after_seq` in seq order, without their states (served by UNIQUE (run_id, seq));
    each has `has_state`."""
    events = (
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id)
        .defer("state")
        .annotate(has_state=ExpressionWrapper(Q(state__isnull=False), output_field=BooleanField()))
    )
    return keyset_page(events, keys=("seq",), cursor=(after_seq,), limit=limit, descending=False)


def event_recent_list(*, run: AgentRun, limit: int = 25) -> list[AgentEvent]:
    return list(
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id).order_by("-seq")[:limit]
    )


def event_latest_refusal(*, run: AgentRun) -> AgentEvent | None:
    """The run's latest event if it is a refused resume."""
    return AgentEvent.objects.filter(
        tenant_id=run.tenant_id, run_id=run.run_id, seq=run.state_revision, event_type="resume_refused"
    ).first()


class EventBucket(NamedTuple):
    start: datetime
    end: datetime
    first_seq: int
    last_seq: int
    events: int


class MarkedEvent(NamedTuple):
    seq: int
    event_type: str
    created_at: datetime
    actor: str
    step_id: str
    trigger: str
    reason: str


_BUCKETS_SQL = """
SELECT LEAST(floor(extract(epoch FROM created_at - %(start)s) / %(width)s)::int, %(last)s) AS b,
       count(*), min(seq), max(seq), min(created_at), max(created_at)
  FROM agent_events WHERE tenant_id = %(tenant_id)s AND run_id = %(run_id)s
 GROUP BY b ORDER BY b
"""


def event_buckets(*, run: AgentRun, count: int) -> list[EventBucket]:
    """Events per slice of the run's time (`count` slices), aggregated in SQL."""
    ends = list(
        AgentEvent.objects.filter(
            tenant_id=run.tenant_id, run_id=run.run_id, seq__in=(1, run.state_revision)
        ).values_list("created_at", flat=True)
    )
    if not ends:
        return []
    start, end = min(ends), max(ends)
    width = max((end - start).total_seconds() / count, 0.001)
    with connection.cursor() as cursor:
        cursor.execute(
            _BUCKETS_SQL,
            {
                "start": start,
                "width": width,
                "last": count - 1,
                "tenant_id": run.tenant_id,
                "run_id": run.run_id,
            },
        )
        return [
            EventBucket(start=row[4], end=row[5], first_seq=row[2], last_seq=row[3], events=row[1])
            for row in cursor.fetchall()
        ]


def event_marked_list(
    *, run: AgentRun, event_types: Sequence[str], limit: int
) -> tuple[list[MarkedEvent], int]:
    """The newest `limit` events of `event_types` in seq order, and how many older ones were left out."""
    rows = (
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, event_type__in=event_types)
        .annotate(trigger=KT("payload__trigger"), reason=KT("payload__reason"))
        .order_by("-seq")
        .values_list("seq", "event_type", "created_at", "actor", "step_id", "trigger", "reason")[: limit + 1]
    )
    marks = [
        MarkedEvent(s, t, c, a or "", st or "", str(tr or ""), str(re or ""))
        for s, t, c, a, st, tr, re in rows
    ]
    hidden = 0
    if len(marks) > limit:
        hidden = AgentEvent.objects.filter(
            tenant_id=run.tenant_id,
            run_id=run.run_id,
            event_type__in=event_types,
            seq__lt=marks[limit - 1].seq,
        ).count()
        marks = marks[:limit]
    return marks[::-1], hidden


@dataclass(frozen=True)
class RevisionState:
    revision: int
    event_type: str
    created_at: datetime
    state: object
    state_seq: int | None  # the event that stored this state (a later event may only point to it)
    digest: str  # the digest the event recorded
    digest_ok: bool | None  # whether the stored state still hashes to it (None: no state stored)
    # The state was redacted by an erasure, as its subject_erased event records (filled in by
    # runs.conversations.selectors.revision_state_erased: erasure is the conversations' business).
    erased: bool = False

    @property
    def text(self) -> str:
        return json.dumps(self.state, ensure_ascii=False, sort_keys=True, indent=1)


def revision_parse(value: object, *, run: AgentRun, name: str = "revision") -> int:
    try:
        revision = int(str(value).strip())
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a whole number", code="invalid_revision") from None
    if not 1 <= revision <= run.state_revision:
        raise InvalidInput(f"{name} must be 1 to {run.state_revision}", code="invalid_revision")
    return revision


def run_state_at(*, run: AgentRun, revision: int) -> RevisionState:
    """The state right after event `revision`: two indexed reads, never the run's whole history."""
    event = (
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, seq=revision)
        .values("event_type", "created_at", "state_digest")
        .first()
    )
    if event is None:
        raise InvalidInput(f"run {run.run_id} has no event {revision}", code="invalid_revision")
    source = (
        AgentEvent.objects.filter(
            tenant_id=run.tenant_id, run_id=run.run_id, seq__lte=revision, state__isnull=False
        )
        .order_by("-seq")
        .values("seq", "state")
        .first()
    )
    state = source["state"] if source else None
    return RevisionState(
        revision,
        event["event_type"],
        event["created_at"],
        state,
        source["seq"] if source else None,
        event["state_digest"],
        None if source is None else json_digest(state) == event["state_digest"],
    )


# Keys the engine keeps in every state: not the run's input as its caller gave it.
_ENGINE_STATE_KEYS = ("budgets", "signals_seen")


def run_input(*, run: AgentRun) -> dict[str, object] | None:
    """What the run was started with: the state its first event stored, without the engine's own keys
    (None when that state is not stored, e.g. a history copy)."""
    first = (
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, seq=1, state__isnull=False)
        .values_list("state", flat=True)
        .first()
    )
    if not isinstance(first, dict):
        return None
    return {k: v for k, v in first.items() if k not in _ENGINE_STATE_KEYS}


def event_states(*, run: AgentRun, seqs: Sequence[int]) -> dict[int, object]:
    """The states stored at these events (an event that stored none is missing from the answer)."""
    rows = AgentEvent.objects.filter(
        tenant_id=run.tenant_id, run_id=run.run_id, seq__in=list(seqs), state__isnull=False
    ).values_list("seq", "state")
    return {seq: state for seq, state in rows}
