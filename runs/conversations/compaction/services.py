"""Summaries of event ranges: written by a compactor from raw events, checked before every use.

A summary covers one continuous seq range and stores the digest of the raw events it was made
from. It is a cache: a summary whose source digest or compactor no longer matches is marked stale
and rebuilt from the raw events, which are always kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.digests import json_digest
from runs.conversations.compaction.compactors import Compactor, compactor_from_settings
from runs.conversations.compaction.tokens import TokenCounter
from runs.engine.models import AgentEvent, AgentRun, Summary, SummaryStatus


def events_as_source(events: Sequence[AgentEvent]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "event_type": e.event_type, "payload": e.payload} for e in events]


def source_digest(events: Sequence[AgentEvent]) -> str:
    """sha256 of the canonical JSON of the range's raw events (seq, type, payload)."""
    return json_digest(events_as_source(events))


def summary_create(
    *, run: AgentRun, events: Sequence[AgentEvent], counter: TokenCounter, compactor: Compactor | None = None
) -> Summary:
    """Compact a continuous range of raw events into a new summary row."""
    if not events:
        raise ValueError("a summary needs at least one event")
    seqs = [e.seq for e in events]
    if seqs != list(range(seqs[0], seqs[-1] + 1)):
        raise ValueError(f"a summary covers a continuous range, not {seqs[:3]}...{seqs[-3:]}")
    compactor = compactor or compactor_from_settings()
    draft = compactor.compact(events_as_source(events))
    return Summary.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        covers_from_seq=seqs[0],
        covers_to_seq=seqs[-1],
        source_digest=source_digest(events),
        compactor=compactor.info.as_json(),
        facts=draft.facts,
        open_questions=draft.open_questions,
        decisions=draft.decisions,
        carry=draft.carry,
        text=draft.text,
        token_count=counter.count(draft.text),
    )


def summary_problem(
    summary: Summary, events_by_seq: dict[int, AgentEvent], compactor: Compactor
) -> str | None:
    """Why this summary must not be used as it is, or None."""
    covered = [events_by_seq.get(s) for s in range(summary.covers_from_seq, summary.covers_to_seq + 1)]
    if any(e is None for e in covered):
        return f"its range {summary.covers_from_seq}..{summary.covers_to_seq} has events missing"
    if source_digest([e for e in covered if e is not None]) != summary.source_digest:
        return "its source events changed since it was written (digest mismatch)"
    if summary.compactor != compactor.info.as_json():
        return (
            f"it was written by compactor {summary.compactor}, the current one is {compactor.info.as_json()}"
        )
    return None


def summaries_usable(
    *, run: AgentRun, events: Sequence[AgentEvent], counter: TokenCounter, compactor: Compactor | None = None
) -> tuple[list[Summary], list[str]]:
    """The run's valid summaries in order, continuous from seq 1; stale ones are rebuilt from raw events.

    Returns the summaries and notes on what was rebuilt and why.
    """
    compactor = compactor or compactor_from_settings()
    by_seq = {e.seq: e for e in events}
    notes: list[str] = []
    chain: list[Summary] = []
    expected_from = 1
    for summary in Summary.objects.filter(run=run, status=SummaryStatus.VALID).order_by("covers_from_seq"):
        if summary.covers_from_seq != expected_from:
            notes.append(f"summary {summary.summary_id} does not continue at seq {expected_from}: not used")
            Summary.objects.filter(pk=summary.pk).update(status=SummaryStatus.STALE)
            continue
        problem = summary_problem(summary, by_seq, compactor)
        if problem is not None:
            Summary.objects.filter(pk=summary.pk).update(status=SummaryStatus.STALE)
            covered = [
                by_seq[s] for s in range(summary.covers_from_seq, summary.covers_to_seq + 1) if s in by_seq
            ]
            if len(covered) != summary.covers_to_seq - summary.covers_from_seq + 1:
                notes.append(f"summary {summary.summary_id} dropped: {problem}; raw events used instead")
                break
            summary = summary_create(run=run, events=covered, counter=counter, compactor=compactor)
            notes.append(f"summary of {summary.covers_from_seq}..{summary.covers_to_seq} rebuilt: {problem}")
        chain.append(summary)
        expected_from = summary.covers_to_seq + 1
    return chain, notes


def carry_merge(summaries: Sequence[Summary]) -> dict[str, list[Any]]:
    """The structured carry of every summary, in order, without duplicates."""
    merged: dict[str, list[Any]] = {}
    for summary in summaries:
        for key, items in (summary.carry or {}).items():
            bucket = merged.setdefault(key, [])
            for item in items:
                if item not in bucket:
                    bucket.append(item)
    return merged
