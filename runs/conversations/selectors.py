"""Reads of conversations: a summary's check against its events, whether an erasure redacted a stored
state, and what a subject's runs keep (conversation events, summaries, Redis windows, tool results)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

import redis
from django.db.models import Count, Q, QuerySet

from core.artifacts import artifacts_stored
from core.errors import ApplicationError
from core.models import Tenant
from runs.conversations.compaction.compactors import compactor_from_settings
from runs.conversations.compaction.services import summary_problem
from runs.conversations.erasure import ERASED_EVENT, redactions_of, subject_session_keys
from runs.conversations.messages import CONVERSATION_EVENTS
from runs.conversations.sessions import redis_client, session_key
from runs.kernel.models import AgentEvent, AgentRun, Summary

logger = logging.getLogger(__name__)

MAX_SUMMARY_CHECK_EVENTS = 5000


@dataclass(frozen=True)
class SummaryCheck:
    ok: bool
    problem: str  # why the summary must not be used as it is ("" when it passes)


def summary_list(*, run: AgentRun, limit: int = 100) -> list[Summary]:
    """The run's summaries in order, without their texts."""
    summaries = Summary.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id).defer(
        "text", "facts", "carry"
    )
    return list(summaries.order_by("covers_from_seq")[:limit])


def summary_get(*, run: AgentRun, summary_id: UUID) -> Summary | None:
    return Summary.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, summary_id=summary_id).first()


def summary_check(*, summary: Summary) -> SummaryCheck:
    """The compaction layer's own check (range complete, source digest, compactor), on the covered
    range only."""
    size = summary.covers_to_seq - summary.covers_from_seq + 1
    if size > MAX_SUMMARY_CHECK_EVENTS:
        return SummaryCheck(
            False, f"covers {size:,} events, more than this page checks ({MAX_SUMMARY_CHECK_EVENTS:,})"
        )
    events = AgentEvent.objects.filter(
        tenant_id=summary.tenant_id,
        run_id=summary.run_id,
        seq__gte=summary.covers_from_seq,
        seq__lte=summary.covers_to_seq,
    ).only("seq", "event_type", "payload")
    try:
        compactor = compactor_from_settings()
    except ApplicationError as exc:
        return SummaryCheck(False, f"cannot check: {exc.message}")
    problem = summary_problem(summary, {e.seq: e for e in events}, compactor)
    return SummaryCheck(problem is None, problem or "")


def revision_state_erased(*, run: AgentRun, state_seq: int | None) -> bool:
    """Whether the state stored at event `state_seq` was redacted by an erasure of the run's subject,
    as its subject_erased events record."""
    if state_seq is None or not run.subject.startswith("erased:"):
        return False
    erasures = AgentEvent.objects.filter(
        tenant_id=run.tenant_id, run_id=run.run_id, event_type=ERASED_EVENT
    ).values("event_type", "payload")
    return state_seq in redactions_of([dict(row) for row in erasures])


# --- what a subject's runs keep (the compliance overview) ------------------------------------------


def subject_run_list(*, tenant: Tenant, subject_id: str, limit: int) -> list[AgentRun]:
    """The subject's runs, newest first, up to `limit + 1` (the extra one says more exist)."""
    runs = AgentRun.objects.filter(tenant=tenant, subject=subject_id).order_by("-created_at")
    return list(runs[: limit + 1])


@dataclass(frozen=True)
class ConversationCount:
    total: int
    redacted: int


def conversation_event_counts(*, runs: list[AgentRun]) -> dict[UUID, ConversationCount]:
    """Conversation events per run, and how many of them an erasure redacted."""
    rows = (
        AgentEvent.objects.filter(run__in=runs, event_type__in=CONVERSATION_EVENTS)
        .values("run_id")
        .annotate(total=Count("id"), redacted=Count("id", filter=Q(payload__has_key="redacted")))
    )
    return {row["run_id"]: ConversationCount(row["total"], row["redacted"]) for row in rows}


def summary_lists_by_run(*, runs: list[AgentRun]) -> dict[UUID, list[Summary]]:
    summaries: dict[UUID, list[Summary]] = {}
    for summary in Summary.objects.filter(run__in=runs).order_by("run_id", "covers_from_seq"):
        summaries.setdefault(summary.run_id, []).append(summary)
    return summaries


def _subject_conversation_events(tenant: Tenant, subject_id: str) -> QuerySet[AgentEvent]:
    return AgentEvent.objects.filter(
        run__tenant=tenant, run__subject=subject_id, event_type__in=CONVERSATION_EVENTS
    )


def subject_unredacted_event_count(*, tenant: Tenant, subject_id: str) -> int:
    return _subject_conversation_events(tenant, subject_id).exclude(payload__has_key="redacted").count()


def subject_summary_count(*, tenant: Tenant, subject_id: str) -> int:
    return Summary.objects.filter(run__tenant=tenant, run__subject=subject_id).count()


def subject_stored_tool_result_count(*, tenant: Tenant, subject_id: str) -> int:
    """Tool results of the subject's conversations still in the artifact store."""
    refs = _subject_conversation_events(tenant, subject_id).filter(payload__content_ref__isnull=False)
    digests = [
        str((p.get("content_ref") or {}).get("digest", "")) for p in refs.values_list("payload", flat=True)
    ]
    return len(artifacts_stored(tenant_id=tenant.tenant_id, digests=digests))


@dataclass(frozen=True)
class SessionWindows:
    sizes: dict[UUID, int]  # entries in each run's Redis window
    keys: int  # the subject's window keys


def subject_session_windows(
    *, tenant: Tenant, subject_id: str, runs: list[AgentRun]
) -> SessionWindows | None:
    """Entries per run window and the number of the subject's window keys; None if Redis is down."""
    try:
        client = redis_client()
        pipe = client.pipeline(transaction=False)
        for run in runs:
            pipe.llen(session_key(run))
        sizes = dict(zip([r.run_id for r in runs], pipe.execute(), strict=True))
        keys = len(subject_session_keys(tenant_id=tenant.tenant_id, subject_id=subject_id))
    except (redis.RedisError, OSError) as exc:
        logger.warning("session windows unavailable for the compliance overview: %s", exc)
        return None
    return SessionWindows(sizes, keys)


# --- a conversation as people read it (the support console) ----------------------------------------

TRANSCRIPT_LIMIT = 300  # the newest messages shown; older ones are behind their summaries


@dataclass(frozen=True)
class Transcript:
    events: list[AgentEvent]  # the conversation's events in order (the newest TRANSCRIPT_LIMIT)
    summaries: list[Summary]  # the valid summaries of older parts, in order, with their texts
    more: bool  # older messages than these exist


def conversation_transcript(*, run: AgentRun, limit: int = TRANSCRIPT_LIMIT) -> Transcript:
    """The run's conversation events (who said what, tool calls and results) and its summaries."""
    events = list(
        AgentEvent.objects.filter(
            tenant_id=run.tenant_id, run_id=run.run_id, event_type__in=CONVERSATION_EVENTS
        )
        .only("seq", "event_type", "payload", "actor", "created_at", "step_id")
        .order_by("-seq")[: limit + 1]
    )
    more = len(events) > limit
    events = events[:limit]
    events.reverse()
    summaries = list(
        Summary.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, status="valid")
        .only("summary_id", "covers_from_seq", "covers_to_seq", "text", "created_at")
        .order_by("covers_from_seq")
    )
    return Transcript(events=events, summaries=summaries, more=more)
