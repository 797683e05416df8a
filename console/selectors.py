"""Reads of the console's own tables (the audit log), and the console's views of several apps at
once (the support inbox, a subject's overview), composed from each app's selectors."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db.models import F, Q, QuerySet
from django.utils import timezone

from console.approvals import approval_reading
from console.display import ClaimChain, approval_row, claim_chains, operation_row, refusal_of
from console.models import AuditEntry
from console.refusals import refusal_in_words
from core.digests import subject_digests
from core.models import Tenant
from core.pagination import KeysetPage, ListOrder, keyset_order, keyset_page, list_orders
from core.roles import member_tenant_ids
from erasure.models import ErasureRequest
from erasure.registry import free_places, places
from erasure.scan import subject_places
from erasure.selectors import erasure_request_list
from memory.selectors import (
    VectorCount,
    memory_subject_items,
    memory_subject_vector_counts,
    memory_tombstone_count,
)
from runs.conversations.selectors import (
    conversation_event_counts,
    subject_run_list,
    subject_session_windows,
    subject_stored_tool_result_count,
    subject_summary_count,
    subject_unredacted_event_count,
    summary_lists_by_run,
)
from runs.engine.selectors import (
    approval_closed_by_erasure_list,
    approval_pending_count,
    approval_pending_list,
    operation_in_doubt_count,
    operation_in_doubt_list,
    run_refused_count,
    run_refused_list,
    run_suspended_count,
    run_suspended_list,
)
from runs.kernel.models import SUBJECT_ERASED, AgentRun, Approval, Summary, ToolOperation
from runs.langgraph.selectors import thread_interrupted_count, thread_interrupted_list

# The audit log's orders (newest first by default). The time, then the id: entries of one instant
# keep the order they were written in. Entries with no tenant (sign-ins) sort last by tenant A to Z.
AUDIT_ORDERS: dict[str, ListOrder] = {
    **list_orders("when", "at", "time", tie="id", tie_kind="i", newest_first=True),
    **list_orders("actor", "actor", "text", tie="id", tie_kind="i"),
    **list_orders("action", "action", "text", tie="id", tie_kind="i"),
    **list_orders("tenant", "tenant_slug", "text", tie="id", tie_kind="i", nullable=True),
}


def tenant_list_for_user(*, user: Any) -> QuerySet[Tenant]:
    """The tenants the user is a member of (every tenant for a superuser), by slug."""
    if user.is_superuser:
        return Tenant.objects.order_by("slug")
    return Tenant.objects.filter(tenant_id__in=member_tenant_ids(user_id=user.pk)).order_by("slug")


def tenant_get_for_user(*, user: Any, tenant: str | UUID) -> Tenant | None:
    """One of the user's tenants, named by id or slug."""
    tenants = tenant_list_for_user(user=user)
    try:
        return tenants.filter(tenant_id=UUID(str(tenant))).first()
    except ValueError:
        return tenants.filter(slug=str(tenant)[:64]).first()


@dataclass(frozen=True)
class AuditFilters:
    """The audit log's filters (all optional): who, what, which tenant and target, and when."""

    actor: str = ""
    action: str = ""
    tenant_id: UUID | None = None
    target: str = ""
    since: datetime | None = None  # from this instant (inclusive)
    until: datetime | None = None  # before this instant


def audit_entries(
    *, tenant_ids: list[UUID] | None, actor: str, filters: AuditFilters, order: str = "when"
) -> QuerySet[AuditEntry]:
    """Audit entries in `order` (AUDIT_ORDERS, newest first by default): of `tenant_ids` and the
    actor's own (every entry with None), filtered."""
    chosen = AUDIT_ORDERS[order]
    entries = AuditEntry.objects.select_related("tenant")
    if chosen.column == "tenant_slug":
        entries = entries.annotate(tenant_slug=F("tenant__slug"))
    if tenant_ids is not None:
        entries = entries.filter(Q(tenant_id__in=tenant_ids) | Q(actor=actor))
    if filters.target:
        entries = entries.filter(target_id=filters.target)
    if filters.actor:  # "alice" finds "user:alice"; a full actor ("system:demo") finds itself
        entries = entries.filter(Q(actor=filters.actor) | Q(actor=f"user:{filters.actor}"))
    if filters.action:
        entries = entries.filter(action=filters.action)
    if filters.tenant_id is not None:
        entries = entries.filter(tenant_id=filters.tenant_id)
    if filters.since is not None:
        entries = entries.filter(at__gte=filters.since)
    if filters.until is not None:
        entries = entries.filter(at__lt=filters.until)
    return keyset_order(entries, keys=chosen.keys, descending=chosen.descending)


def audit_entry_page(
    *,
    tenant_ids: list[UUID] | None,
    actor: str,
    target: str = "",
    cursor: tuple[object, object] | None,
    limit: int,
    filters: AuditFilters | None = None,
    order: str = "when",
) -> KeysetPage[AuditEntry]:
    """One keyset page of `audit_entries` in `order` (`cursor`: the last row's (column value, id)
    of the page before)."""
    chosen = AUDIT_ORDERS[order]
    entries = audit_entries(
        tenant_ids=tenant_ids,
        actor=actor,
        filters=filters if filters is not None else AuditFilters(target=target),
        order=order,
    )
    return keyset_page(
        entries,
        keys=chosen.keys,
        cursor=cursor,
        limit=limit,
        descending=chosen.descending,
        nullable=chosen.nullable,
    )


def offboardings_of_member(*, user_id: int) -> list[AuditEntry]:
    """The erasures of whole tenants the user was a member of (the console records each tenant's
    members on the entry, as the memberships go with the tenant), newest first."""
    return list(
        AuditEntry.objects.filter(action="tenant_erased", details__members__contains=[user_id]).order_by(
            "-id"
        )[:5]
    )


def operation_last_lookup(*, op: ToolOperation) -> AuditEntry | None:
    """The newest lookup a person asked for from the console (recorded in the audit log)."""
    return (
        AuditEntry.objects.filter(
            tenant_id=op.tenant_id,
            action="lookup",
            target_type="operation",
            target_id__in=[str(op.pk), op.operation_id],
        )
        .order_by("-id")
        .first()
    )


# --- the support inbox -----------------------------------------------------------------------------

INBOX_LIMIT = 100  # rows per section; the oldest first, so nothing waits unseen behind newer work
CLOSED_SHOWN_FOR = timedelta(days=7)  # how long an approval an erasure closed stays noted in the inbox


@dataclass
class Inbox:
    approvals: list[dict[str, Any]] = field(default_factory=list)
    closed: list[Approval] = field(default_factory=list)  # approvals an erasure closed lately
    operations: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    questions: list[AgentRun] = field(default_factory=list)  # LangGraph threads at an interrupt()
    other: list[AgentRun] = field(default_factory=list)
    # How many each list holds in all: each shows its oldest INBOX_LIMIT, and a count of what is shown
    # ("(100)") would hide the rest.
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.totals.values())


# Runs no person here can continue: an engineer's fork not started waits for that engineer (the run
# page); a run whose subject was erased never continues (nothing can resume it).
_NOT_SUPPORTS = ("fork_not_started", SUBJECT_ERASED)


def support_inbox(*, tenant_ids: list[UUID], now: datetime) -> Inbox:
    """What waits for a person in the user's tenants, by kind; a run appears once."""
    inbox = Inbox()
    inbox.approvals = [
        {**approval_row(a, now), "reading": approval_reading(a)}
        for a in approval_pending_list(tenant_ids=tenant_ids, limit=INBOX_LIMIT)
    ]
    # Approvals an erasure of their run's subject closed lately: said, not dropped without a word.
    inbox.closed = approval_closed_by_erasure_list(
        tenant_ids=tenant_ids, since=now - CLOSED_SHOWN_FOR, limit=INBOX_LIMIT
    )
    inbox.operations = [
        operation_row(op, operation_last_lookup(op=op))
        for op in operation_in_doubt_list(tenant_ids=tenant_ids, limit=INBOX_LIMIT)
    ]
    inbox.refused = [
        {"run": run, **refused, "words": refusal_in_words(refused)}
        for run, event in run_refused_list(tenant_ids=tenant_ids, limit=INBOX_LIMIT)
        if (refused := refusal_of(event))
    ]
    inbox.questions = thread_interrupted_list(tenant_ids=tenant_ids, limit=INBOX_LIMIT)
    inbox.other = run_suspended_list(tenant_ids=tenant_ids, limit=INBOX_LIMIT, reasons_excluded=_NOT_SUPPORTS)
    inbox.totals = {
        name: len(rows) if len(rows) < INBOX_LIMIT else count()
        for name, rows, count in (
            ("approvals", inbox.approvals, lambda: approval_pending_count(tenant_ids=tenant_ids)),
            ("operations", inbox.operations, lambda: operation_in_doubt_count(tenant_ids=tenant_ids)),
            ("refused", inbox.refused, lambda: run_refused_count(tenant_ids=tenant_ids)),
            ("questions", inbox.questions, lambda: thread_interrupted_count(tenant_ids=tenant_ids)),
            (
                "other",
                inbox.other,
                lambda: run_suspended_count(tenant_ids=tenant_ids, reasons_excluded=_NOT_SUPPORTS),
            ),
        )
    }
    return inbox


# --- everything Keeper keeps about one subject (the compliance screens) ----------------------------

MAX_RUNS = 200
STORE_LABELS = {
    "memory_items": "Memory items (claims)",
    "memory_vectors": "Memory vectors",
    "runs.events": "Conversation events (text redacted)",
    "runs.summaries": "Summaries",
    "runs.redis_session_windows": "Redis session windows",
    "runs.artifacts": "Stored tool results",
}


@dataclass(frozen=True)
class StoreCount:
    key: str
    label: str
    count: int | None  # None: the store could not be read (Redis down)


@dataclass(frozen=True)
class SubjectRun:
    run: AgentRun
    conversation_events: int
    redacted_events: int
    window_size: int | None  # entries in the Redis window; None when Redis is unreachable
    summaries: list[Summary] = field(default_factory=list)


@dataclass(frozen=True)
class SubjectOverview:
    tenant: Tenant
    subject_id: str
    digest: str
    chains: list[ClaimChain]
    claim_count: int
    vectors: list[VectorCount]
    runs: list[SubjectRun]
    more_runs: bool
    redis_available: bool
    artifacts: int
    tombstones: int
    erasures: list[ErasureRequest]
    stores: list[StoreCount]
    # Every registered place holding the subject's id or text, counted as an erasure's receipt counts
    # it before erasing (run state, events of every run, approvals, operations, audit notes...).
    places: list[StoreCount] = field(default_factory=list)

    @property
    def summaries(self) -> list[Summary]:
        return [s for r in self.runs for s in r.summaries]

    @property
    def nothing_stored(self) -> bool:
        return not any(s.count for s in self.stores) and not any(p.count for p in self.places)


def subject_overview(*, tenant: Tenant, subject_id: str) -> SubjectOverview:
    """Everything Keeper keeps about one subject of one tenant: the stores erasure/ erases
    and scans (memory items and vectors; of the subject's runs, conversation events, summaries, Redis
    session windows and stored tool results) and every registered place. Reads only."""
    # Declared-free columns are listed where they hold the subject (a webhook URL, an API key's label):
    # their labels too (without one, the page would answer 500 for exactly such a subject).
    what = {place.name: place.what for place in [*places(), *free_places()]}
    digests = subject_digests(tenant_id=tenant.tenant_id, subject_id=subject_id)  # keyed, then older unkeyed
    items = memory_subject_items(tenant=tenant, subject_id=subject_id)
    vectors = memory_subject_vector_counts(tenant=tenant, subject_id=subject_id)
    runs = subject_run_list(tenant=tenant, subject_id=subject_id, limit=MAX_RUNS)
    more_runs, runs = len(runs) > MAX_RUNS, runs[:MAX_RUNS]
    events = conversation_event_counts(runs=runs)
    summaries = summary_lists_by_run(runs=runs)
    windows = subject_session_windows(tenant=tenant, subject_id=subject_id, runs=runs)
    subject_runs = [
        SubjectRun(
            run=run,
            conversation_events=events[run.run_id].total if run.run_id in events else 0,
            redacted_events=events[run.run_id].redacted if run.run_id in events else 0,
            window_size=None if windows is None else windows.sizes[run.run_id],
            summaries=summaries.get(run.run_id, []),
        )
        for run in runs
    ]
    artifacts = subject_stored_tool_result_count(tenant=tenant, subject_id=subject_id)
    counts = {
        "memory_items": len(items),
        "memory_vectors": sum(v["count"] for v in vectors),
        "runs.events": subject_unredacted_event_count(tenant=tenant, subject_id=subject_id),
        "runs.summaries": subject_summary_count(tenant=tenant, subject_id=subject_id),
        "runs.redis_session_windows": None if windows is None else windows.keys,
        "runs.artifacts": artifacts,
    }
    return SubjectOverview(
        tenant=tenant,
        subject_id=subject_id,
        digest=digests[0],
        chains=claim_chains(items, now=timezone.now()),
        claim_count=len(items),
        vectors=vectors,
        runs=subject_runs,
        more_runs=more_runs,
        redis_available=windows is not None,
        artifacts=artifacts,
        tombstones=memory_tombstone_count(tenant=tenant, subject_digests=digests),
        erasures=erasure_request_list(tenant=tenant, subject_digests=digests),
        stores=[StoreCount(key=k, label=STORE_LABELS[k], count=v) for k, v in counts.items()],
        places=[
            StoreCount(key=name, label=what[name], count=n)
            for name, n in subject_places(tenant_id=tenant.tenant_id, subject_id=subject_id).items()
            if n != 0
        ],
    )
