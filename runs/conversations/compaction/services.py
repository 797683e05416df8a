"""Summaries of event ranges: written by a compactor from raw events, checked before every use.

A summary covers one continuous seq range and stores the digest of the raw events it was made
from. It is a cache: a summary whose source digest or compactor no longer matches is marked stale
and rebuilt from the raw events, which are always kept. Raw events win: a fact the compactor wrote
that the events it cites do not support is dropped before the summary is stored, and a summary with
a fact that changes their meaning (meaning.py: negation, a condition, an amount's currency) is held
for a person's review, never used; the range gets the extractive compactor's summary instead, which
quotes the events, until a person releases the held one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from prometheus_client import Counter

from core.digests import canonical_json, json_digest
from runs.conversations.compaction.compactors import (
    Compactor,
    ExtractiveCompactor,
    compactor_from_settings,
    summary_render,
)
from runs.conversations.compaction.meaning import facts_meaning_check
from runs.conversations.compaction.tokens import TokenCounter
from runs.engine.charges import model_calls_charged
from runs.kernel.models import AgentEvent, AgentRun, Summary, SummaryStatus

UNSUPPORTED_FACTS = Counter(
    "keeper_summary_facts_unsupported",
    "Facts a compactor wrote that the events they cite do not support (dropped from the summary).",
    ["compactor"],
)
HELD_SUMMARIES = Counter(
    "keeper_summaries_held",
    "Summaries held for review: a fact of theirs changed the meaning of the events it cites.",
    ["compactor"],
)


def events_as_source(events: Sequence[AgentEvent]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "event_type": e.event_type, "payload": e.payload} for e in events]


def source_digest(events: Sequence[AgentEvent]) -> str:
    """sha256 of the canonical JSON of the range's raw events (seq, type, payload)."""
    return json_digest(events_as_source(events))


# --- facts checked against the events they cite -------------------------------------------------

# A value is what a reader could act on: a number, an amount, an id (any word with a digit), an
# e-mail or a quoted string. Prose around them is not checked (no code can judge a paraphrase).
_QUOTED = re.compile(r"\"([^\"]{2,200})\"|“([^”]{2,200})”|«([^»]{2,200})»")
_TOKEN = re.compile(r"[^\s,;()\[\]{}<>\"“”«»]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def fact_values(text: str) -> list[str]:
    """The values in a fact's text that the cited events must contain."""
    values = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]
    for token in _TOKEN.findall(_QUOTED.sub(" ", text)):
        token = token.strip(".:!?…'’`")
        if any(ch.isdigit() for ch in token) or ("@" in token and "." in token):
            values.append(token)
    return list(dict.fromkeys(v for v in values if v))


def _numbers(text: str) -> set[Decimal]:
    found: set[Decimal] = set()
    for raw in _NUMBER.findall(text):
        for candidate in (raw.replace(",", ""), raw.replace(".", "").replace(",", "."), raw):
            try:
                found.add(Decimal(candidate).normalize())
            except InvalidOperation:
                continue
    return found


def _supported(value: str, haystack: str, numbers: set[Decimal]) -> bool:
    if value.casefold() in haystack:
        return True
    # "25" for "25.00", "1,200" for "1200": a bare number is the same number however it is written.
    if _NUMBER.fullmatch(value):
        return bool(_numbers(value) & numbers)
    return False


def facts_check(
    facts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(supported, unsupported): a fact is unsupported when a seq it cites is not in the range or a
    value in its text (fact_values) appears in none of the events it cites."""
    by_seq = {e["seq"]: e for e in events}
    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for fact in facts:
        first, last = fact["source_seq"]
        cited = [by_seq[s] for s in range(first, last + 1) if s in by_seq]
        if len(cited) != last - first + 1:
            dropped.append({**fact, "why": f"cites events {first}..{last} outside the summarized range"})
            continue
        haystack = canonical_json(
            [{"event_type": e["event_type"], "payload": e["payload"]} for e in cited]
        ).casefold()
        # canonical JSON escapes quotes and non-ASCII may be escaped: compare against the raw texts too
        haystack += "\n" + "\n".join(_texts(e["payload"]) for e in cited).casefold()
        numbers = _numbers(haystack)
        missing = [v for v in fact_values(fact["text"]) if not _supported(v, haystack, numbers)]
        if missing:
            dropped.append({**fact, "why": f"not in events {first}..{last}: {', '.join(missing)[:200]}"})
        else:
            kept.append(fact)
    return kept, dropped


def _texts(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(f"{k}\n{_texts(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(_texts(v) for v in value)
    return "" if value is None else str(value)


def summary_create(
    *,
    run: AgentRun,
    events: Sequence[AgentEvent],
    counter: TokenCounter,
    compactor: Compactor | None = None,
    rewrites: int = -1,
    hold: bool = True,
) -> Summary:
    """Compact a continuous range of raw events into a new summary row.

    rewrites: the sum of the range's agent_events.rewrites read before `events` were (-1 if not
    known: the first use then checks the digest). Facts the cited events do not support are dropped
    from the summary and kept in unsupported_facts. A fact that changes their meaning holds the whole
    summary for review (status held, the fact and why in unsupported_facts); `hold` False drops such
    facts like unsupported ones instead (a fallback must be usable).
    """
    if not events:
        raise ValueError("a summary needs at least one event")
    seqs = [e.seq for e in events]
    if seqs != list(range(seqs[0], seqs[-1] + 1)):
        raise ValueError(f"a summary covers a continuous range, not {seqs[:3]}...{seqs[-3:]}")
    compactor = compactor or compactor_from_settings()
    source = events_as_source(events)
    with model_calls_charged(run_id=run.run_id, actor="system:compactor"):  # a model compactor's call
        draft = compactor.compact(source)
    facts, unsupported = facts_check(draft.facts, source)
    meant, changed = facts_meaning_check(facts, source)
    held = hold and bool(changed)
    if not held:
        facts, unsupported = meant, unsupported + changed
    text = draft.text
    if unsupported:
        UNSUPPORTED_FACTS.labels(compactor=compactor.info.prompt_version).inc(len(unsupported))
    if held:
        HELD_SUMMARIES.labels(compactor=compactor.info.prompt_version).inc()
        unsupported = unsupported + [{**fact, "held": True} for fact in changed]
    if unsupported:
        text = summary_render(
            first=seqs[0],
            last=seqs[-1],
            facts=facts,
            decisions=draft.decisions,
            open_questions=draft.open_questions,
            carry=draft.carry,
        )
    return Summary.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        covers_from_seq=seqs[0],
        covers_to_seq=seqs[-1],
        source_digest=json_digest(source),
        compactor=compactor.info.as_json(),
        facts=facts,
        open_questions=draft.open_questions,
        decisions=draft.decisions,
        carry=draft.carry,
        text=text,
        token_count=counter.count(text),
        rewrites_checked=rewrites,
        unsupported_facts=unsupported,
        status=SummaryStatus.HELD if held else SummaryStatus.VALID,
    )


def summary_compact(
    *,
    run: AgentRun,
    events: Sequence[AgentEvent],
    counter: TokenCounter,
    compactor: Compactor | None = None,
    rewrites: int = -1,
) -> Summary:
    """The summary a context uses for these events: the compactor's, or when that one is held for
    review, the extractive compactor's (it quotes the events; a fact of it that still fails is
    dropped), which stands in for the held one until a person releases it."""
    summary = summary_create(run=run, events=events, counter=counter, compactor=compactor, rewrites=rewrites)
    if summary.status != SummaryStatus.HELD:
        return summary
    return summary_create(
        run=run,
        events=events,
        counter=counter,
        compactor=ExtractiveCompactor(),
        rewrites=rewrites,
        hold=False,
    )


def summary_held_release(*, run: AgentRun, summary_id: Any) -> Summary:
    """A person read a held summary and its facts are right: it is used from now on, and the summary
    that stood in for it is stale. (The caller records who decided, and why.)"""
    with transaction.atomic():
        held = Summary.objects.select_for_update().get(
            tenant_id=run.tenant_id, run=run, summary_id=summary_id, status=SummaryStatus.HELD
        )
        Summary.objects.filter(
            tenant_id=run.tenant_id,
            run=run,
            covers_from_seq=held.covers_from_seq,
            covers_to_seq=held.covers_to_seq,
            status=SummaryStatus.VALID,
        ).update(status=SummaryStatus.STALE)
        Summary.objects.filter(tenant_id=run.tenant_id, pk=held.pk).update(status=SummaryStatus.VALID)
        held.status = SummaryStatus.VALID
    return held


def _held_keys(run: AgentRun) -> set[tuple[int, int, str, str]]:
    """(from, to, source digest, compactor) of the run's held summaries: a summary of the same events
    by another compactor stands in for each, and is not rebuilt for having another compactor."""
    rows = Summary.objects.filter(tenant_id=run.tenant_id, run=run, status=SummaryStatus.HELD).values_list(
        "covers_from_seq", "covers_to_seq", "source_digest", "compactor"
    )
    return {(a, b, digest, canonical_json(info)) for a, b, digest, info in rows}


# --- checking summaries before use -------------------------------------------------------------


def summary_problem(
    summary: Summary, events_by_seq: dict[int, AgentEvent], compactor: Compactor, *, stands_in: bool = False
) -> str | None:
    """Why this summary must not be used as it is, or None. stands_in: it stands in for the current
    compactor's summary of the same events, held for review (its compactor may differ)."""
    covered = [events_by_seq.get(s) for s in range(summary.covers_from_seq, summary.covers_to_seq + 1)]
    if any(e is None for e in covered):
        return f"its range {summary.covers_from_seq}..{summary.covers_to_seq} has events missing"
    if source_digest([e for e in covered if e is not None]) != summary.source_digest:
        return "its source events changed since it was written (digest mismatch)"
    if summary.compactor != compactor.info.as_json() and not stands_in:
        return (
            f"it was written by compactor {summary.compactor}, the current one is {compactor.info.as_json()}"
        )
    return None


def run_rewrites(*, run: AgentRun, up_to_seq: int | None = None) -> dict[int, int]:
    """{seq: rewrites} of the run's events changed after they were written (a partial index: only
    those rows are read)."""
    rows = AgentEvent.objects.filter(tenant_id=run.tenant_id, run=run, rewrites__gt=0)
    if up_to_seq is not None:
        rows = rows.filter(seq__lte=up_to_seq)
    return dict(rows.values_list("seq", "rewrites"))


def range_rewrites(rewritten: dict[int, int], first: int, last: int) -> int:
    return sum(n for seq, n in rewritten.items() if first <= seq <= last)


def _range_events(run: AgentRun, first: int, last: int) -> list[AgentEvent]:
    return list(
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run=run, seq__gte=first, seq__lte=last)
        .only("seq", "event_type", "payload")
        .order_by("seq")
    )


def summaries_usable(
    *,
    run: AgentRun,
    counter: TokenCounter,
    compactor: Compactor | None = None,
    up_to_seq: int | None = None,
    events: Sequence[AgentEvent] | None = None,
    rewritten: dict[int, int] | None = None,
) -> tuple[list[Summary], list[str]]:
    """The run's valid summaries in order, continuous from seq 1 and ending at or before up_to_seq;
    stale ones are rebuilt from raw events.

    A summary's raw events are read (and digested) only when they were rewritten since it was last
    checked (agent_events.rewrites, counted by a trigger) or it was never checked; otherwise it costs
    nothing but its own row, so a turn's cost does not grow with the length of the summarized past.
    `events`, when given, are the run's events (a full check, without reading them again).
    Returns the summaries and notes on what was rebuilt and why.
    """
    compactor = compactor or compactor_from_settings()
    if rewritten is None:
        rewritten = run_rewrites(run=run, up_to_seq=up_to_seq)
    by_seq = {e.seq: e for e in events} if events is not None else None
    current = compactor.info.as_json()
    held = _held_keys(run)
    notes: list[str] = []
    chain: list[Summary] = []
    expected_from = 1
    rows = Summary.objects.filter(tenant_id=run.tenant_id, run=run, status=SummaryStatus.VALID)
    if up_to_seq is not None:
        rows = rows.filter(covers_to_seq__lte=up_to_seq)
    # facts, questions and decisions are the summary's record; its text and carry are what a context uses.
    rows = rows.defer("facts", "open_questions", "decisions", "unsupported_facts")
    for summary in rows.order_by("covers_from_seq"):
        if summary.covers_from_seq != expected_from:
            notes.append(f"summary {summary.summary_id} does not continue at seq {expected_from}: not used")
            Summary.objects.filter(tenant_id=run.tenant_id, pk=summary.pk).update(status=SummaryStatus.STALE)
            continue
        first, last = summary.covers_from_seq, summary.covers_to_seq
        seen = range_rewrites(rewritten, first, last)
        stands_in = (first, last, summary.source_digest, canonical_json(current)) in held
        compactor_changed = summary.compactor != current and not stands_in
        if by_seq is None and seen == summary.rewrites_checked and not compactor_changed:
            chain.append(summary)  # its events are the ones it was checked against
            expected_from = last + 1
            continue
        local = by_seq if by_seq is not None else {e.seq: e for e in _range_events(run, first, last)}
        problem = summary_problem(summary, local, compactor, stands_in=stands_in)
        if problem is None:
            if seen != summary.rewrites_checked:
                Summary.objects.filter(tenant_id=run.tenant_id, pk=summary.pk).update(rewrites_checked=seen)
                summary.rewrites_checked = seen
        else:
            Summary.objects.filter(tenant_id=run.tenant_id, pk=summary.pk).update(status=SummaryStatus.STALE)
            covered = [local[s] for s in range(first, last + 1) if s in local]
            if len(covered) != last - first + 1:
                notes.append(f"summary {summary.summary_id} dropped: {problem}; raw events used instead")
                break
            summary = summary_compact(
                run=run, events=covered, counter=counter, compactor=compactor, rewrites=seen
            )
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
            seen = {canonical_json(item) for item in bucket}
            for item in items:
                digest = canonical_json(item)
                if digest not in seen:
                    seen.add(digest)
                    bucket.append(item)
    return merged
