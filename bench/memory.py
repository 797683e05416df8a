"""Memory search at scale: hybrid recall latency under row-level security beside the same queries
without it, and the recall@10 of the smallest tenant's vector search against an exact scan."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from core.db_router import OWNER_ALIAS
from core.models import Tenant
from core.processes import current_database_url
from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryItem
from memory.projection import (
    RRF_K,
    memory_project,
    memory_search,
    memory_vector_index_ensure,
    text_candidates,
    text_statements,
    vector_candidates,
    vector_statements,
)

CANDIDATES = 50  # what memory_search asks each arm for
SHARES = [60, 10, 8, 6, 5, 4, 3, 2, 1.5, 0.5]  # percent of the items per tenant: one holds 60%
WORDS = [
    f"{a}{b}"
    for a in (
        "refund",
        "order",
        "parcel",
        "invoice",
        "card",
        "city",
        "language",
        "plan",
        "phone",
        "email",
        "delivery",
        "address",
        "coupon",
        "account",
        "support",
    )
    for b in ("", "s", "ed", "ing", "er", "ly", "al", "ion")
]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by rank (nearest rank below), as every benchmark here reports it."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _seed(tenant: Tenant, n: int, rng: random.Random) -> None:
    now = timezone.now()
    provenance = {
        "source_type": "import",
        "source_id": "bench",
        "source_version": None,
        "run_id": None,
        "event_seq": None,
        "validation_method": "unvalidated",
    }
    with tenant_scope(tenant.tenant_id):
        MemoryItem.objects.bulk_create(
            [
                MemoryItem(
                    tenant=tenant,
                    subject_id=f"s{i % 500}",
                    namespace="profile",
                    key=f"k{i}",
                    value=" ".join(rng.choices(WORDS, k=10)),
                    provenance=provenance,
                    valid_from=now,
                )
                for i in range(n)
            ],
            batch_size=5000,
        )


def _candidate_queries(
    conn: psycopg.Connection[Any], tenant: Tenant, embedder: HashingEmbedder, query: str, *, rls: bool
) -> None:
    """memory_search's two candidate queries, the very statements it sends (memory.projection builds
    them for both). Under RLS: as the application role, the tenant set for the transaction. Without:
    on a connection RLS does not bind (the embedded superuser)."""
    [vector] = embedder.embed([query])
    now = timezone.now()
    statements = vector_statements(
        tenant_id=tenant.tenant_id, embedder=embedder, vector=vector, limit=CANDIDATES, valid_at=now
    )
    text = text_statements(tenant_id=tenant.tenant_id, query=query, limit=CANDIDATES, valid_at=now)
    with conn.transaction(), conn.cursor() as cursor:
        if rls:
            cursor.execute("SELECT set_config('app.tenant_id', %s, true)", [str(tenant.tenant_id)])
        for sql, params in [*statements, *text]:
            cursor.execute(sql, params)
        cursor.fetchall()


def _timed_queries(
    dsn: str, asked: list[tuple[Tenant, str]], embedder: HashingEmbedder, *, rls: bool
) -> list[float]:
    times = []
    # Client-side binding, as Django sends them: the planner sees the tenant's id, so it can match
    # the tenant's partial indexes.
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        for tenant, query in asked:
            t0 = time.perf_counter()
            _candidate_queries(conn, tenant, embedder, query, rls=rls)
            times.append((time.perf_counter() - t0) * 1000)
    return times


def _arm_times(asked: list[tuple[Tenant, str]], embedder: HashingEmbedder) -> tuple[list[float], list[float]]:
    """Each arm as memory_search calls it, timed alone inside the tenant's scope."""
    by_vector, by_text = [], []
    for tenant, query in asked:
        [vector] = embedder.embed([query])
        now = timezone.now()
        with tenant_scope(tenant.tenant_id):
            t0 = time.perf_counter()
            vector_candidates(tenant=tenant, embedder=embedder, vector=vector, limit=CANDIDATES, valid_at=now)
            t1 = time.perf_counter()
            text_candidates(tenant=tenant, query=query, limit=CANDIDATES, valid_at=now)
            t2 = time.perf_counter()
        by_vector.append((t1 - t0) * 1000)
        by_text.append((t2 - t1) * 1000)
    return by_vector, by_text


def _exact_vector(tenant: Tenant, embedder: HashingEmbedder, vector: list[float], limit: int) -> list[Any]:
    """The tenant's nearest current claims by a sequential scan and a sort (no graph)."""
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        return vector_candidates(
            tenant=tenant, embedder=embedder, vector=vector, limit=limit, valid_at=timezone.now()
        )


def _recall(got: list[Any], exact: list[Any]) -> float | None:
    return len(set(got) & set(exact)) / len(exact) if exact else None


def _recalls(tenant: Tenant, embedder: HashingEmbedder, rng: random.Random, n: int) -> dict[str, float]:
    """recall@10 of the vector arm against a sequential scan of the same tenant, and of the fused
    search against the fusion of that exact ranking with the text arm's (which is exact: ts_rank over
    every match)."""
    found: dict[str, list[float]] = {"vector": [], "fused": []}
    for _ in range(n):
        query = " ".join(rng.choices(WORDS, k=4))
        [vector] = embedder.embed([query])
        now = timezone.now()
        exact_vector = _exact_vector(tenant, embedder, vector, CANDIDATES)
        with tenant_scope(tenant.tenant_id):
            got_vector = vector_candidates(tenant=tenant, embedder=embedder, vector=vector, limit=10)
            by_text = text_candidates(tenant=tenant, query=query, limit=CANDIDATES, valid_at=now)
        scores: dict[Any, float] = {}
        for ranking in (exact_vector, by_text):
            for rank, memory_id in enumerate(ranking, start=1):
                scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
        exact_fused = sorted(scores, key=lambda m: (-scores[m], str(m)))[:10]
        got_fused = [
            h.item.memory_id for h in memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
        ]
        for arm, got, exact in (
            ("vector", got_vector, exact_vector[:10]),
            ("fused", got_fused, exact_fused),
        ):
            value = _recall(got, exact)
            if value is not None:
                found[arm].append(value)
    return {arm: round(statistics.mean(values), 3) for arm, values in found.items() if values}


def bench_memory_search(*, items: int, queries: int, progress: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(33)
    embedder = HashingEmbedder()
    tenants = [tenant_ensure(slug=f"bench-mem-{i}") for i in range(len(SHARES))]
    sizes = [max(20, int(items * share / 100)) for share in SHARES]
    try:
        for tenant, size in zip(tenants, sizes, strict=True):
            _seed(tenant, size, rng)
            memory_project(tenant=tenant, embedder=embedder)
            memory_vector_index_ensure(tenant=tenant, dimensions=embedder.dimensions)
        progress(f"memory_search: {sum(sizes)} items over {len(tenants)} tenants seeded and indexed")
        return memory_search_figures(tenants=tenants, queries=queries, rng=rng, progress=progress)
    finally:
        for tenant in tenants:
            with tenant_scope(tenant.tenant_id):
                MemoryItem.objects.all().delete()
            if OWNER_ALIAS in connections.databases:
                with connections[OWNER_ALIAS].cursor() as cursor:
                    cursor.execute(
                        f"DROP INDEX IF EXISTS memory_vectors_hnsw_{tenant.tenant_id.hex}_{embedder.dimensions}"
                    )


def memory_search_figures(
    *, tenants: list[Tenant], queries: int, rng: random.Random, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The figures over seeded tenants (one per SHARES entry, largest first)."""
    embedder = HashingEmbedder()
    asked = [
        (rng.choices(tenants, weights=SHARES)[0], " ".join(rng.choices(WORDS, k=4))) for _ in range(queries)
    ]
    hybrid = []
    for tenant, query in asked:
        t0 = time.perf_counter()
        memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
        hybrid.append((time.perf_counter() - t0) * 1000)
    by_vector, by_text = _arm_times(asked, embedder)
    rls = _timed_queries(current_database_url(), asked, embedder, rls=True)
    total = 0
    for tenant in tenants:
        with tenant_scope(tenant.tenant_id):
            total += MemoryItem.objects.count()
    result: dict[str, Any] = {
        "items": total,
        "tenants": len(tenants),
        "queries": queries,
        "hybrid_search_p50_ms": round(percentile(hybrid, 0.5), 2),
        "hybrid_search_p99_ms": round(percentile(hybrid, 0.99), 2),
        "vector_p50_ms": round(percentile(by_vector, 0.5), 2),
        "vector_p99_ms": round(percentile(by_vector, 0.99), 2),
        "text_p50_ms": round(percentile(by_text, 0.5), 2),
        "text_p99_ms": round(percentile(by_text, 0.99), 2),
        "rls_p50_ms": round(percentile(rls, 0.5), 2),
        "rls_p99_ms": round(percentile(rls, 0.99), 2),
    }
    superuser = settings.KEEPER_BENCH_SUPERUSER_URL
    if superuser:
        dsn = superuser.replace("/keeper?", f"/{connections['default'].settings_dict['NAME']}?")
        base = _timed_queries(dsn, asked, embedder, rls=False)
        result.update(
            {
                "no_rls_p50_ms": round(percentile(base, 0.5), 2),
                "no_rls_p99_ms": round(percentile(base, 0.99), 2),
                "ratio_p50": round(percentile(rls, 0.5) / percentile(base, 0.5), 2),
            }
        )
    else:
        result["no_rls_baseline"] = "unavailable: needs the embedded server's superuser"
    smallest, largest = tenants[-1], tenants[0]
    with tenant_scope(smallest.tenant_id):
        result["smallest_tenant_items"] = MemoryItem.objects.count()
    small = _recalls(smallest, embedder, rng, 50)
    large = _recalls(largest, embedder, rng, 20)
    result["recall_at_10_smallest_tenant"] = small["vector"]
    result.update(
        {f"recall_at_10_{arm}_smallest_tenant": value for arm, value in small.items() if arm != "vector"}
    )
    result.update({f"recall_at_10_{arm}_largest_tenant": value for arm, value in large.items()})
    progress(
        f"memory_search: p50 {result['rls_p50_ms']} ms with RLS (vector {result['vector_p50_ms']}, text "
        f"{result['text_p50_ms']}), hybrid {result['hybrid_search_p50_ms']}; recall@10 {small}"
    )
    return result
