"""Reads behind the engineer screens: the filtered, keyset-paged run list, one run's page of events,
its timeline aggregate, its state at a revision and the diff of two, summaries and retrieval snapshots.

Runs, events and operations have no row-level security: every read here starts from the user's
tenant ids. Nothing reads a whole big table or a whole big run: lists are keyset pages on indexed
orders, the timeline is aggregated in SQL, a state diff reads exactly the two revisions asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone

from console.timeline import DEFAULT_BUCKETS, MARKED_EVENT_TYPES, Bucket, TimelineEvent
from core.digests import json_digest
from core.errors import ApplicationError, InvalidInput
from core.tenancy import tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.conversations.compaction.compactors import compactor_from_settings
from runs.conversations.compaction.services import summary_problem
from runs.conversations.erasure import ERASED_EVENT, redactions_of
from runs.engine.models import AgentEvent, AgentRun, Summary

EVENTS_PAGE, MAX_EVENTS_PAGE = 200, 500
MAX_MARKS = 400  # marked events drawn on one timeline (the newest)
MAX_DIFF_ENTRIES = 500
PAYLOAD_PREVIEW_CHARS = 3000
# Only what a list row shows: a run's state may be 256 KB, and a page must not drag 50 of them along.
LIST_FIELDS = (
    "run_id",
    "tenant_id",
    "workflow_name",
    "workflow_version",
    "status",
    "next_step",
    "suspend_reason",
    "state_revision",
    "lease_owner",
    "lease_expires_at",
    "attempt",
    "idempotency_key",
    "subject",
    "created_at",
    "updated_at",
)


def runs_filtered(*, tenant_ids: list[UUID], filters: Mapping[str, Any]) -> QuerySet[AgentRun]:
    """The user's runs that match validated filters (unordered); `tenant_id` narrows to one of them."""
    data = filters
    runs = AgentRun.objects.filter(tenant_id__in=tenant_ids)
    if data.get("tenant_id"):
        runs = runs.filter(tenant_id=data["tenant_id"])
    if query := (data.get("q") or "").strip():
        try:
            runs = runs.filter(Q(run_id=UUID(query)) | Q(idempotency_key=query))
        except ValueError:
            runs = runs.filter(idempotency_key=query)
    for field, column in (
        ("status", "status"),
        ("workflow", "workflow_name"),
        ("version", "workflow_version"),
        ("reason", "suspend_reason"),
    ):
        if data.get(field):
            runs = runs.filter(**{column: data[field]})
    if data.get("since"):
        runs = runs.filter(updated_at__gte=data["since"])
    if data.get("until"):
        runs = runs.filter(updated_at__lte=data["until"])
    return runs


@dataclass(frozen=True)
class RunPage:
    runs: list[AgentRun]
    next_cursor: tuple[datetime, UUID] | None  # (updated_at, run_id) of the last row, if there is more


MAX_MERGED_TENANTS = 50


def _keyset(runs: QuerySet[AgentRun], before: tuple[datetime, UUID] | None) -> QuerySet[AgentRun]:
    page = runs.only(*LIST_FIELDS).order_by("-updated_at", "-run_id")
    if before is None:
        return page
    at, run_id = before
    # The redundant `updated_at <= at` lets the index range scan start at the cursor.
    return page.filter(updated_at__lte=at).filter(Q(updated_at__lt=at) | Q(updated_at=at, run_id__lt=run_id))


def runs_page(
    *, tenant_ids: list[UUID], filters: Mapping[str, Any], before: tuple[datetime, UUID] | None, limit: int
) -> RunPage:
    """One keyset page, newest first by (updated_at, run_id): no OFFSET and no COUNT(*).

    For several tenants it is one UNION ALL of a page per tenant (each an ordered range scan of an
    index led by tenant_id), merged and cut again: `tenant_id IN (...)` cannot be read in order."""
    tenants = [filters["tenant_id"]] if filters.get("tenant_id") else tenant_ids
    if 1 < len(tenants) <= MAX_MERGED_TENANTS:
        parts = [
            _keyset(runs_filtered(tenant_ids=[t], filters=filters), before)[: limit + 1] for t in tenants
        ]
        page = parts[0].union(*parts[1:], all=True).order_by("-updated_at", "-run_id")
    else:
        page = _keyset(runs_filtered(tenant_ids=tenants, filters=filters), before)
    rows = list(page[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return RunPage(rows, (rows[-1].updated_at, rows[-1].run_id) if more and rows else None)


def count_capped(runs: QuerySet[AgentRun], cap: int) -> int:
    """How many rows match, counting no further than cap + 1 (never a COUNT over the whole table)."""
    return len(runs.order_by().values_list("run_id", flat=True)[: cap + 1])


# --- one run --------------------------------------------------------------------------------------


def _abbreviated(value: Any, depth: int = 0) -> Any:
    """Long strings, long lists and deep nesting cut short, so every top-level key stays visible."""
    if isinstance(value, str):
        return value if len(value) <= 400 else f"{value[:400]}… ({len(value) - 400:,} more characters)"
    if depth >= 6 and isinstance(value, dict | list) and value:
        return "{…}" if isinstance(value, dict) else "[…]"
    if isinstance(value, dict):
        return {str(k)[:200]: _abbreviated(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_abbreviated(v, depth + 1) for v in value[:30]] + (
            [f"… {len(value) - 30} more"] if len(value) > 30 else []
        )
    return value


def payload_preview(value: Any, limit: int = PAYLOAD_PREVIEW_CHARS) -> str:
    text = json.dumps(_abbreviated(value), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def events_page(*, run: AgentRun, after_seq: int, limit: int) -> list[AgentEvent]:
    """Events after `after_seq` in seq order, without their states (served by UNIQUE (run_id, seq))."""
    events: list[AgentEvent] = list(
        AgentEvent.objects.filter(run_id=run.run_id, seq__gt=after_seq)
        .defer("state")
        .annotate(has_state=ExpressionWrapper(Q(state__isnull=False), output_field=BooleanField()))
        .order_by("seq")[:limit]
    )
    for event in events:  # formatted here once: a 200-row page through template filters costs ~40 ms
        moment = timezone.localtime(event.created_at)
        event.payload_text = payload_preview(event.payload)  # type: ignore[attr-defined]
        event.time_text = moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"  # type: ignore[attr-defined]
        event.time_iso = moment.isoformat()  # type: ignore[attr-defined]
    return events


_BUCKETS_SQL = """
SELECT LEAST(floor(extract(epoch FROM created_at - %(start)s) / %(width)s)::int, %(last)s) AS b,
       count(*), min(seq), max(seq), min(created_at), max(created_at)
  FROM agent_events WHERE run_id = %(run_id)s
 GROUP BY b ORDER BY b
"""


def timeline_data(*, run: AgentRun) -> tuple[list[Bucket], list[TimelineEvent], int]:
    """Activity per time slice (aggregated in SQL), the newest MAX_MARKS marked events, and how many
    older marked events were left out. Never reads the run's events one by one."""
    ends = list(
        AgentEvent.objects.filter(run_id=run.run_id, seq__in=(1, run.state_revision)).values_list(
            "created_at", flat=True
        )
    )
    buckets: list[Bucket] = []
    if ends:
        start, end = min(ends), max(ends)
        width = max((end - start).total_seconds() / DEFAULT_BUCKETS, 0.001)
        with connection.cursor() as cursor:
            cursor.execute(
                _BUCKETS_SQL,
                {"start": start, "width": width, "last": DEFAULT_BUCKETS - 1, "run_id": run.run_id},
            )
            buckets = [
                Bucket(start=row[4], end=row[5], first_seq=row[2], last_seq=row[3], count=row[1])
                for row in cursor.fetchall()
            ]
    marked = (
        AgentEvent.objects.filter(run_id=run.run_id, event_type__in=MARKED_EVENT_TYPES)
        .annotate(trigger=KT("payload__trigger"), reason=KT("payload__reason"))
        .order_by("-seq")
        .values_list("seq", "event_type", "created_at", "actor", "step_id", "trigger", "reason")[
            : MAX_MARKS + 1
        ]
    )
    marks = [
        TimelineEvent(
            seq=s,
            event_type=t,
            created_at=c,
            actor=a or "",
            step_id=st or "",
            trigger=str(tr or ""),
            reason=str(re or ""),
        )
        for s, t, c, a, st, tr, re in marked
    ]
    hidden = 0
    if len(marks) > MAX_MARKS:
        hidden = AgentEvent.objects.filter(
            run_id=run.run_id, event_type__in=MARKED_EVENT_TYPES, seq__lt=marks[MAX_MARKS - 1].seq
        ).count()
        marks = marks[:MAX_MARKS]
    return buckets, marks[::-1], hidden


@dataclass(frozen=True)
class RevisionState:
    revision: int
    event_type: str
    created_at: datetime
    state: Any
    state_seq: int | None  # the event that stored this state (a later event may only point to it)
    digest: str  # the digest the event recorded
    digest_ok: bool | None  # whether the stored state still hashes to it (None: no state stored)
    erased: bool = False  # the state was redacted by an erasure, as its subject_erased event records

    @property
    def text(self) -> str:
        return json.dumps(self.state, ensure_ascii=False, sort_keys=True, indent=1)


def revision_parse(value: Any, *, run: AgentRun, name: str = "revision") -> int:
    try:
        revision = int(str(value).strip())
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a whole number", code="invalid_revision") from None
    if not 1 <= revision <= run.state_revision:
        raise InvalidInput(f"{name} must be 1 to {run.state_revision}", code="invalid_revision")
    return revision


def state_at(*, run: AgentRun, revision: int) -> RevisionState:
    """The state right after event `revision`: two indexed reads, never the run's whole history."""
    event = (
        AgentEvent.objects.filter(run_id=run.run_id, seq=revision)
        .values("event_type", "created_at", "state_digest")
        .first()
    )
    if event is None:
        raise InvalidInput(f"run {run.run_id} has no event {revision}", code="invalid_revision")
    source = (
        AgentEvent.objects.filter(run_id=run.run_id, seq__lte=revision, state__isnull=False)
        .order_by("-seq")
        .values("seq", "state")
        .first()
    )
    state = source["state"] if source else None
    ok = None if source is None else json_digest(state) == event["state_digest"]
    erased = False
    if ok is False and run.subject.startswith("erased:"):
        erasures = AgentEvent.objects.filter(run_id=run.run_id, event_type=ERASED_EVENT).values(
            "event_type", "payload"
        )
        erased = source is not None and source["seq"] in redactions_of(list(erasures))
    return RevisionState(
        revision,
        event["event_type"],
        event["created_at"],
        state,
        source["seq"] if source else None,
        event["state_digest"],
        ok,
        erased,
    )


@dataclass(frozen=True)
class DiffEntry:
    path: str
    change: str  # "added", "removed" or "changed"
    old: str
    new: str


def _path(parent: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return (
        f"{parent}.{key}"
        if str(key).isidentifier()
        else f"{parent}[{json.dumps(str(key), ensure_ascii=False)}]"
    )


def _show(value: Any, limit: int = 2000) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def json_diff(old: Any, new: Any, *, limit: int = MAX_DIFF_ENTRIES) -> tuple[list[DiffEntry], bool]:
    """Paths added, removed or changed from `old` to `new` (objects by key, lists by index), and
    whether the list was cut at `limit`. Iterative, so a 200-deep state cannot exhaust the stack."""
    entries: list[DiffEntry] = []
    stack: list[tuple[str, Any, Any]] = [("$", old, new)]
    while stack:
        if len(entries) >= limit:
            return entries, True
        path, a, b = stack.pop()
        if type(a) is type(b) and a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str, reverse=True):
                stack.append((_path(path, key), a.get(key, _MISSING), b.get(key, _MISSING)))
        elif isinstance(a, list) and isinstance(b, list):
            for index in reversed(range(max(len(a), len(b)))):
                stack.append(
                    (
                        _path(path, index),
                        a[index] if index < len(a) else _MISSING,
                        b[index] if index < len(b) else _MISSING,
                    )
                )
        elif a is _MISSING:
            entries.append(DiffEntry(path, "added", "", _show(b)))
        elif b is _MISSING:
            entries.append(DiffEntry(path, "removed", _show(a), ""))
        else:
            entries.append(DiffEntry(path, "changed", _show(a), _show(b)))
    return entries, False


_MISSING: Any = object()


# --- summaries and retrieval snapshots ------------------------------------------------------------

MAX_SUMMARY_CHECK_EVENTS = 5000


@dataclass(frozen=True)
class SummaryCheck:
    ok: bool
    problem: str  # why the summary must not be used as it is ("" when it passes)


def summary_check(summary: Summary) -> SummaryCheck:
    """The compaction layer's own check (range complete, source digest, compactor), on the covered
    range only."""
    size = summary.covers_to_seq - summary.covers_from_seq + 1
    if size > MAX_SUMMARY_CHECK_EVENTS:
        return SummaryCheck(
            False, f"covers {size:,} events, more than this page checks ({MAX_SUMMARY_CHECK_EVENTS:,})"
        )
    events = AgentEvent.objects.filter(
        run_id=summary.run_id, seq__gte=summary.covers_from_seq, seq__lte=summary.covers_to_seq
    ).only("seq", "event_type", "payload")
    try:
        compactor = compactor_from_settings()
    except ApplicationError as exc:
        return SummaryCheck(False, f"cannot check: {exc.message}")
    problem = summary_problem(summary, {e.seq: e for e in events}, compactor)
    return SummaryCheck(problem is None, problem or "")


def snapshots_for(*, run: AgentRun, limit: int = 20) -> list[RetrievalSnapshot]:
    """The run's newest retrieval snapshots, read under the run's tenant (the table has RLS)."""
    with tenant_scope(run.tenant_id):
        return list(RetrievalSnapshot.objects.filter(run_id=run.run_id).order_by("-created_at")[:limit])
