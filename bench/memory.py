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
from django.db import connections
from django.utils import timezone

from core.db_router import OWNER_ALIAS
from core.models import Tenant
from core.processes import current_database_url
from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryItem, MemoryVector
from memory.projection import memory_project, memory_search, memory_vector_index_ensure, vector_candidates

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
    conn: psycopg.Connection, tenant: Tenant, embedder: HashingEmbedder, query: str, *, rls: bool
) -> None:
    """memory_search's two candidate queries, as it sends them. Under RLS: as the application role,
    the tenant set for the transaction. Without: on a connection RLS does not bind (the embedded
    superuser)."""
    [vector] = embedder.embed([query])
    dims = embedder.dimensions
    words = " | ".join(dict.fromkeys(query.lower().split()))
    with conn.transaction():
        if rls:
            conn.execute("SELECT set_config('app.tenant_id', %s, true)", [str(tenant.tenant_id)])
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        conn.execute(
            f"""SELECT memory_id FROM memory_vectors WHERE tenant_id = %(tenant)s AND embedder_key = %(key)s
                  AND dimensions = {dims} ORDER BY embedding::vector({dims}) <=> %(v)s::vector({dims}) LIMIT 200""",
            {"tenant": tenant.tenant_id, "key": embedder.key, "v": str(vector)},
        ).fetchall()
        conn.execute(
            """SELECT memory_id FROM memory_items WHERE tenant_id = %(tenant)s AND search @@ to_tsquery('simple', %(q)s)
                ORDER BY ts_rank(search, to_tsquery('simple', %(q)s)) DESC LIMIT 50""",
            {"tenant": tenant.tenant_id, "q": words},
        ).fetchall()


def _timed_queries(
    dsn: str, asked: list[tuple[Tenant, str]], embedder: HashingEmbedder, *, rls: bool
) -> list[float]:
    times = []
    with psycopg.connect(dsn) as conn:
        for tenant, query in asked:
            t0 = time.perf_counter()
            _candidate_queries(conn, tenant, embedder, query, rls=rls)
            times.append((time.perf_counter() - t0) * 1000)
    return times


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
        asked = [
            (rng.choices(tenants, weights=SHARES)[0], " ".join(rng.choices(WORDS, k=4)))
            for _ in range(queries)
        ]
        hybrid = []
        for tenant, query in asked:
            t0 = time.perf_counter()
            memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
            hybrid.append((time.perf_counter() - t0) * 1000)
        rls = _timed_queries(current_database_url(), asked, embedder, rls=True)
        result: dict[str, Any] = {
            "items": sum(sizes),
            "tenants": len(tenants),
            "queries": queries,
            "hybrid_search_p50_ms": round(percentile(hybrid, 0.5), 2),
            "hybrid_search_p99_ms": round(percentile(hybrid, 0.99), 2),
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
        smallest = tenants[-1]
        with tenant_scope(smallest.tenant_id):
            rows = [(v.memory_id, list(map(float, v.embedding))) for v in MemoryVector.objects.all()]
        hits = []
        for _ in range(50):
            [vector] = embedder.embed([" ".join(rng.choices(WORDS, k=4))])
            exact = {
                m
                for m, _ in sorted(
                    rows, key=lambda r: -sum(a * b for a, b in zip(vector, r[1], strict=True))
                )[:10]
            }
            with tenant_scope(smallest.tenant_id):
                got = set(vector_candidates(tenant=smallest, embedder=embedder, vector=vector, limit=10))
            hits.append(len(got & exact) / min(10, len(rows)))
        result["smallest_tenant_items"] = len(rows)
        result["recall_at_10_smallest_tenant"] = round(statistics.mean(hits), 3)
        progress(
            f"memory_search: p50 {result['rls_p50_ms']} ms with RLS; recall@10 {result['recall_at_10_smallest_tenant']}"
        )
        return result
    finally:
        for tenant in tenants:
            with tenant_scope(tenant.tenant_id):
                MemoryItem.objects.all().delete()
            if OWNER_ALIAS in connections.databases:
                with connections[OWNER_ALIAS].cursor() as cursor:
                    cursor.execute(
                        f"DROP INDEX IF EXISTS memory_vectors_hnsw_{tenant.tenant_id.hex}_{embedder.dimensions}"
                    )
