"""Everything Keeper keeps about one subject of one tenant, for the compliance screens.

The stores are the ones memory/erasure.py erases and scans: memory items and their vectors (read
in the tenant's scope, as row-level security requires), and, of the subject's runs, conversation
events, summaries, Redis session windows and stored tool results. Reads only: nothing here
rebuilds a session window or touches what it shows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from django.db.models import Count, Q
from django.utils import timezone

from core.erasure import places
from core.models import Tenant
from memory.erasure import subject_digest, subject_places
from memory.models import PROVENANCE_KEYS, ErasureRequest, MemoryItem
from memory.selectors import (
    VectorCount,
    erasure_request_list,
    memory_subject_items,
    memory_subject_vector_counts,
    memory_tombstone_count,
)
from runs.conversations.erasure import subject_session_keys
from runs.conversations.messages import CONVERSATION_EVENTS
from runs.conversations.sessions import redis_client, session_key
from runs.engine.models import AgentEvent, AgentRun, Summary

logger = logging.getLogger(__name__)

MAX_RUNS = 200
MAX_SHOWN_CHARS = 20_000  # per value: a megabyte of one claim must not make the page unusable
COMPACT_BEYOND_DEPTH = 12  # deeper JSON is shown on wrapped lines instead of a staircase of indents
STORE_LABELS = {
    "memory_items": "Memory items (claims)",
    "memory_vectors": "Memory vectors",
    "runs.events": "Conversation events (text redacted)",
    "runs.summaries": "Summaries",
    "runs.redis_session_windows": "Redis session windows",
    "runs.artifacts": "Stored tool results",
}


def json_depth(value: Any) -> int:
    """Nesting depth, iteratively (a hostile value may be nested deeper than Python recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def pretty_json(value: Any, *, limit: int = MAX_SHOWN_CHARS) -> str:
    """The value as readable JSON text for a <pre> (the template escapes it), cut at `limit`."""
    try:
        if json_depth(value) > COMPACT_BEYOND_DEPTH:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        else:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)
    except (RecursionError, TypeError, ValueError):
        return f"(a value nested {json_depth(value)} levels deep; too deep to show)"
    if len(text) > limit:
        return f"{text[:limit]}\n… ({len(text) - limit} more characters not shown, {len(text)} in all)"
    return text


@dataclass(frozen=True)
class StoreCount:
    key: str
    label: str
    count: int | None  # None: the store could not be read (Redis down)


@dataclass(frozen=True)
class Claim:
    item: MemoryItem
    state: str  # current, superseded, invalidated, expired, not yet valid
    value_text: str
    provenance: list[tuple[str, str, bool]]
    superseded_by: Any = None  # the memory_id of the newer claim in the chain


@dataclass(frozen=True)
class ClaimChain:
    """One key's claims linked by `supersedes`, newest first."""

    namespace: str
    key: str
    claims: list[Claim]


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


def claim_state(item: MemoryItem, now: Any) -> str:
    if item.invalidated_at is not None:
        return "superseded" if item.invalidation_reason == "superseded" else "invalidated"
    if item.expires_at is not None and item.expires_at <= now:
        return "expired"
    if item.valid_from > now:
        return "not yet valid"
    return "current"


def _provenance(provenance: Any) -> list[tuple[str, str, bool]]:
    """(key, text, shown as a block) per provenance field, the standard fields first."""
    if not isinstance(provenance, dict):
        provenance = {"provenance": provenance}
    keys = [k for k in PROVENANCE_KEYS if k in provenance] + sorted(set(provenance) - set(PROVENANCE_KEYS))
    rows = []
    for k in keys:
        v = provenance[k]
        text = v if isinstance(v, str) else pretty_json(v, limit=2000)
        rows.append((k, text, isinstance(v, dict | list)))
    return rows


def claim_chains(items: list[MemoryItem]) -> list[ClaimChain]:
    """Follow `supersedes` from each newest claim back to the first; chains sorted by scope."""
    now = timezone.now()
    by_id = {item.memory_id: item for item in items}
    newer = {item.supersedes_id: item.memory_id for item in items if item.supersedes_id in by_id}
    chains = []
    for head in (item for item in items if item.memory_id not in newer):
        claims, seen = [], set()
        node: MemoryItem | None = head
        while node is not None and node.memory_id not in seen:
            seen.add(node.memory_id)
            claims.append(
                Claim(
                    item=node,
                    state=claim_state(node, now),
                    value_text=pretty_json(node.value),
                    provenance=_provenance(node.provenance),
                    superseded_by=newer.get(node.memory_id),
                )
            )
            node = by_id.get(node.supersedes_id) if node.supersedes_id is not None else None
        chains.append(ClaimChain(namespace=head.namespace, key=head.key, claims=claims))
    return sorted(chains, key=lambda c: (c.namespace, c.key, -c.claims[0].item.created_at.timestamp()))


def _session_windows(
    tenant: Tenant, subject_id: str, runs: list[AgentRun]
) -> tuple[dict[Any, int], int] | None:
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
    return sizes, keys


def _stored_tool_results(tenant: Tenant, subject_id: str) -> int:
    refs = AgentEvent.objects.filter(
        run__tenant=tenant,
        run__subject=subject_id,
        event_type__in=CONVERSATION_EVENTS,
        payload__content_ref__isnull=False,
    )
    uris = [str((p.get("content_ref") or {}).get("uri", "")) for p in refs.values_list("payload", flat=True)]
    return sum(1 for u in uris if u.startswith("file://") and Path(u[len("file://") :]).exists())


def subject_overview(*, tenant: Tenant, subject_id: str) -> SubjectOverview:
    what = {place.name: place.what for place in places()}
    digest = subject_digest(tenant_id=tenant.tenant_id, subject_id=subject_id)
    items = memory_subject_items(tenant=tenant, subject_id=subject_id)
    vectors = memory_subject_vector_counts(tenant=tenant, subject_id=subject_id)
    all_runs = AgentRun.objects.filter(tenant=tenant, subject=subject_id).order_by("-created_at")
    runs = list(all_runs[: MAX_RUNS + 1])
    more_runs, runs = len(runs) > MAX_RUNS, runs[:MAX_RUNS]
    events: dict[Any, Mapping[str, Any]] = {
        row["run_id"]: row
        for row in AgentEvent.objects.filter(run__in=runs, event_type__in=CONVERSATION_EVENTS)
        .values("run_id")
        .annotate(total=Count("id"), redacted=Count("id", filter=Q(payload__has_key="redacted")))
    }
    summaries: dict[Any, list[Summary]] = {}
    for summary in Summary.objects.filter(run__in=runs).order_by("run_id", "covers_from_seq"):
        summaries.setdefault(summary.run_id, []).append(summary)
    windows = _session_windows(tenant, subject_id, runs)
    subject_runs = [
        SubjectRun(
            run=run,
            conversation_events=events.get(run.run_id, {}).get("total", 0),
            redacted_events=events.get(run.run_id, {}).get("redacted", 0),
            window_size=None if windows is None else windows[0][run.run_id],
            summaries=summaries.get(run.run_id, []),
        )
        for run in runs
    ]
    unredacted = (
        AgentEvent.objects.filter(
            run__tenant=tenant, run__subject=subject_id, event_type__in=CONVERSATION_EVENTS
        )
        .exclude(payload__has_key="redacted")
        .count()
    )
    artifacts = _stored_tool_results(tenant, subject_id)
    counts = {
        "memory_items": len(items),
        "memory_vectors": sum(v["count"] for v in vectors),
        "runs.events": unredacted,
        "runs.summaries": Summary.objects.filter(run__tenant=tenant, run__subject=subject_id).count(),
        "runs.redis_session_windows": None if windows is None else windows[1],
        "runs.artifacts": artifacts,
    }
    return SubjectOverview(
        tenant=tenant,
        subject_id=subject_id,
        digest=digest,
        chains=claim_chains(items),
        claim_count=len(items),
        vectors=vectors,
        runs=subject_runs,
        more_runs=more_runs,
        redis_available=windows is not None,
        artifacts=artifacts,
        tombstones=memory_tombstone_count(tenant=tenant, subject_digest=digest),
        erasures=erasure_request_list(tenant=tenant, subject_digest=digest),
        stores=[StoreCount(key=k, label=STORE_LABELS[k], count=v) for k, v in counts.items()],
        places=[
            StoreCount(key=name, label=what[name], count=n)
            for name, n in subject_places(tenant_id=tenant.tenant_id, subject_id=subject_id).items()
            if n != 0
        ],
    )


def erasure_steps(erasure: ErasureRequest) -> list[dict[str, Any]]:
    """The request's progress as steps (memory, then each registered eraser), each done or waiting."""
    from core.erasure import erasers

    progress = erasure.progress if isinstance(erasure.progress, dict) else {}
    names = ["memory", *(e.name for e in erasers())]
    names += [name for name in progress if name not in names]
    return [
        {
            "name": name,
            "done": name in progress,
            "counts": sorted((progress.get(name) or {}).items())
            if isinstance(progress.get(name), dict)
            else [],
        }
        for name in names
    ]


def receipt_rows(receipt: dict[str, Any] | None) -> dict[str, Any]:
    """The receipt as rows for a template (JSON keys such as "items" would clash with dict methods)."""
    if not isinstance(receipt, dict):
        return {}
    counts, scan = receipt.get("counts"), receipt.get("final_scan")
    counts, scan = (counts if isinstance(counts, dict) else {}), (scan if isinstance(scan, dict) else {})
    places = [p for p in receipt.get("places") or [] if isinstance(p, dict)]  # receipts before places: none
    return {
        "counts": sorted(counts.items()),
        "scan": sorted(scan.items()),
        "places": places,
        "remanence": receipt.get("remanence", ""),
        "left_behind": sorted((k, v) for k, v in scan.items() if v),
        "clean": receipt.get("clean") is True,
        "subject_digest": receipt.get("subject_digest", ""),
        "completed_at": receipt.get("completed_at", ""),
        "text": pretty_json(receipt, limit=200_000),
    }
