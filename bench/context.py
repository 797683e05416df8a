"""The context of a long conversation after its first compaction, at two lengths side by side.

A turn reads the run's summaries and the events after the last one, so building the context of a
10,000-event conversation should cost what a 1,000-event one does. Beside both: reading the whole
log, the floor a builder that rereads every event on every turn could not go under. The model is
gpt-3.5-turbo (16k window, exact counts) so that both lengths are past their first compaction;
context_build (bench/runs.py) times the 10,000-event case with the default model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.runs import conversation_run_bulk
from core.models import Tenant
from core.tenancy import tenant_bind
from runs.kernel.models import AgentEvent


def _texts(events: int) -> list[str]:
    texts = [
        f"Message {i}: where is my parcel for order ord-{i % 97}? It was due on Monday."
        for i in range(events)
    ]
    texts[4] = "Refund 25.00 EUR for order ord-5, and never call me by phone."
    return texts


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _one(*, events: int, model: str, rounds: int) -> dict[str, Any]:
    from runs.conversations.compaction.tokens import token_counter
    from runs.conversations.context import context_build

    run = conversation_run_bulk(tenant_slug="bench", texts=_texts(events))
    counter = token_counter(model)
    tenant = Tenant.objects.get(slug="bench")
    with tenant_bind(tenant.tenant_id):
        first = _timed(lambda: context_build(run=run, counter=counter))  # compacts: writes the summaries
        built = context_build(run=run, counter=counter)
        builds, reads = [], []
        for _ in range(rounds):  # alternate, so drift in the machine hits both alike
            builds.append(_timed(lambda: context_build(run=run, counter=counter)))
            reads.append(_timed(lambda: list(AgentEvent.objects.filter(run=run).order_by("seq"))))
    return {
        "build_ms": round(statistics.median(builds), 1),
        "read_log_ms": round(statistics.median(reads), 1),
        "first_build_ms": round(first, 1),
        "events_read": built.events_read,
        "summaries_used": len(built.summaries),
        "tokens": built.total,
    }


def bench_context(
    *, small: int, large: int, rounds: int, progress: Callable[[str], None], model: str = "gpt-3.5-turbo"
) -> dict[str, Any]:
    """Build the context of a `small`- and a `large`-event conversation after compaction (median of
    `rounds` builds each), and read each whole log beside it."""
    from runs.conversations.compaction.tokens import token_counter

    a = _one(events=small, model=model, rounds=rounds)
    b = _one(events=large, model=model, rounds=rounds)
    progress(
        f"context over {small} events: build {a['build_ms']:.1f} ms (log read {a['read_log_ms']:.1f} ms); "
        f"over {large} events: build {b['build_ms']:.1f} ms (log read {b['read_log_ms']:.1f} ms)"
    )
    return {
        "model": model,
        "small_events": small,
        "large_events": large,
        "small_build_ms": a["build_ms"],
        "large_build_ms": b["build_ms"],
        # How a turn's cost grows with 10x the conversation: 1.0 is flat.
        "growth": round(b["build_ms"] / a["build_ms"], 2) if a["build_ms"] else None,
        "small_read_log_ms": a["read_log_ms"],
        "large_read_log_ms": b["read_log_ms"],
        "large_build_vs_log_read": round(b["build_ms"] / b["read_log_ms"], 2) if b["read_log_ms"] else None,
        "small_first_build_ms": a["first_build_ms"],
        "large_first_build_ms": b["first_build_ms"],
        "small_events_read": a["events_read"],
        "large_events_read": b["events_read"],
        "large_summaries_used": b["summaries_used"],
        "tokens_exact": token_counter(model).exact,
    }
