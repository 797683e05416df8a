"""Memory search at scale: hybrid recall latency under row-level security beside the same queries
without it, each arm's p50/p99, recall@10 of each arm and of the fused result against exact
rankings, and (with the `peers` extra) tantivy's BM25 on the same corpus and queries."""

from __future__ import annotations

import random
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from core.db_router import OWNER_ALIAS
from core.models import Tenant
from core.processes import current_database_url
from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryItem
from memory.projection import (
    RRF_K,
    candidate_statement,
    candidates_fetch,
    memory_project,
    memory_search,
    memory_text,
    memory_vector_index_ensure,
    text_candidates,
    vector_candidates,
)

CANDIDATES = 50  # what memory_search asks each arm for
WORD = re.compile(r"\w+")
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


def vacuum(tables: list[str]) -> None:
    """VACUUM (ANALYZE) freshly seeded tables as their owner, as autovacuum would soon: the planner
    gets statistics and index-only scans a visibility map (without the owner connection, nothing)."""
    if OWNER_ALIAS not in connections.databases:
        return
    with connections[OWNER_ALIAS].cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM (ANALYZE) {table}")  # Keeper's own table names
    settle()


def settle() -> None:
    """A checkpoint before anything is timed, where the embedded server's superuser may ask for one:
    a bulk seeding leaves up to shared_buffers of pages to write, which the checkpointer otherwise
    writes out over minutes, during the timed queries (a running system is timed, not one in the
    minutes after a bulk load). On a server of your own (no superuser URL), nothing."""
    superuser = settings.KEEPER_BENCH_SUPERUSER_URL
    if superuser:
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute("CHECKPOINT")


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
    """memory_search's candidate statement, the very one it sends (memory.projection builds it: both
    arms in one round trip). Under RLS: as the application role, the tenant set for the transaction.
    Without: on a connection RLS does not bind (the embedded superuser)."""
    [vector] = embedder.embed([query])
    statement = candidate_statement(
        tenant_id=tenant.tenant_id,
        embedder=embedder,
        vector=vector,
        query=query,
        limit=CANDIDATES,
        valid_at=timezone.now(),
    )
    with conn.transaction(), conn.cursor() as cursor:
        if rls:
            cursor.execute("SELECT set_config('app.tenant_id', %s, true)", [str(tenant.tenant_id)])
        candidates_fetch(cursor, statement)


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


# The text arm before postings (ts_rank over every match, which RLS keeps off the GIN index): timed
# beside the postings arm in the same run, so the two figures share the machine's load.
TS_RANK_TEXT = """
    SELECT i.memory_id FROM memory_items i
     WHERE i.tenant_id = %s AND i.invalidated_at IS NULL AND (i.expires_at IS NULL OR i.expires_at > %s)
       AND i.search @@ to_tsquery('simple', %s)
     ORDER BY ts_rank(i.search, to_tsquery('simple', %s)) DESC, i.memory_id LIMIT %s"""


def _arm_times(
    asked: list[tuple[Tenant, str]], embedder: HashingEmbedder
) -> tuple[list[float], list[float], list[float]]:
    """Each arm as memory_search calls it, timed alone inside the tenant's scope, and the text arm
    without postings (ts_rank over every match), interleaved."""
    by_vector, by_text, by_ts_rank = [], [], []
    for tenant, query in asked:
        [vector] = embedder.embed([query])
        now = timezone.now()
        words = " | ".join(dict.fromkeys(WORD.findall(query.lower())))
        with tenant_scope(tenant.tenant_id):
            t0 = time.perf_counter()
            vector_candidates(tenant=tenant, embedder=embedder, vector=vector, limit=CANDIDATES, valid_at=now)
            t1 = time.perf_counter()
            text_candidates(tenant=tenant, query=query, limit=CANDIDATES, valid_at=now)
            t2 = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(TS_RANK_TEXT, [tenant.tenant_id, now, words, words, CANDIDATES])
                cursor.fetchall()
            t3 = time.perf_counter()
        by_vector.append((t1 - t0) * 1000)
        by_text.append((t2 - t1) * 1000)
        by_ts_rank.append((t3 - t2) * 1000)
    return by_vector, by_text, by_ts_rank


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
    """recall@10 of the vector arm against a sequential scan of the same tenant, of the text arm
    against every posting of the words ranked (depth=None: the same ts_rank scores over every match),
    and of the fused search against the fusion of those two exact rankings."""
    found: dict[str, list[float]] = {"vector": [], "text": [], "fused": []}
    for _ in range(n):
        query = " ".join(rng.choices(WORDS, k=4))
        [vector] = embedder.embed([query])
        now = timezone.now()
        exact_vector = _exact_vector(tenant, embedder, vector, CANDIDATES)
        with tenant_scope(tenant.tenant_id):
            got_vector = vector_candidates(tenant=tenant, embedder=embedder, vector=vector, limit=10)
            by_text = text_candidates(tenant=tenant, query=query, limit=CANDIDATES, valid_at=now)
            exact_text = text_candidates(
                tenant=tenant, query=query, limit=CANDIDATES, valid_at=now, depth=None
            )
        scores: dict[Any, float] = {}
        for ranking in (exact_vector, exact_text):
            for rank, memory_id in enumerate(ranking, start=1):
                scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
        exact_fused = sorted(scores, key=lambda m: (-scores[m], str(m)))[:10]
        got_fused = [
            h.item.memory_id for h in memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
        ]
        for arm, got, exact in (
            ("vector", got_vector, exact_vector[:10]),
            ("text", by_text[:10], exact_text[:10]),
            ("fused", got_fused, exact_fused),
        ):
            value = _recall(got, exact)
            if value is not None:
                found[arm].append(value)
    return {arm: round(statistics.mean(values), 3) for arm, values in found.items() if values}


def tantivy_reference(
    docs: list[tuple[Any, str, list[str]]],
    asked: list[tuple[str, list[str] | None]],
    keeper: Callable[[str, list[str] | None], list[Any]],
    limit: int,
) -> dict[str, Any]:
    """tantivy's BM25 (PyPI `tantivy`, the `peers` extra) over the same texts (id, text, ACL groups)
    and queries (text, the principal's groups or None), in a RAM index in this process: p50/p99 of
    its top `limit` (the ACL a required term-set clause), and overlap@10 with `keeper`'s top 10 for
    the same query. BM25 weighs rare words and ts_rank does not, so the overlap is not a recall."""
    try:
        import tantivy  # noqa: PLC0415 - an optional peer
    except ImportError:
        return {"tantivy": "not installed: pip install -e '.[peers]'"}
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False)
    builder.add_text_field("key", stored=True, tokenizer_name="raw")
    builder.add_text_field("acl", stored=False, tokenizer_name="raw")
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer()
    for key, text, acl in docs:
        writer.add_document(tantivy.Document(body=[text], key=[str(key)], acl=acl))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    times, overlaps = [], []
    for text, groups in asked:
        t0 = time.perf_counter()
        words = index.parse_query_lenient(" ".join(WORD.findall(text.lower())), ["body"])[0]
        query = (
            words
            if groups is None
            else tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, tantivy.Query.term_set_query(schema, "acl", groups)),
                    (tantivy.Occur.Must, words),
                ]
            )
        )
        hits = [searcher.doc(address)["key"][0] for _, address in searcher.search(query, limit).hits]
        times.append((time.perf_counter() - t0) * 1000)
        mine = [str(key) for key in keeper(text, groups)[:10]]
        if mine:
            overlaps.append(len(set(hits[:10]) & set(mine)) / len(mine))
    return {
        "tantivy_docs": len(docs),
        "tantivy_p50_ms": round(percentile(times, 0.5), 2),
        "tantivy_p99_ms": round(percentile(times, 0.99), 2),
        "tantivy_overlap_at_10": round(statistics.mean(overlaps), 3) if overlaps else None,
    }


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
        vacuum(["memory_items", "memory_vectors", "memory_postings"])
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


def _tantivy(tenant: Tenant, queries: list[str]) -> dict[str, Any]:
    """tantivy beside the text arm, on the largest tenant's current claims and the queries asked of it."""
    with tenant_scope(tenant.tenant_id):
        docs: list[tuple[Any, str, list[str]]] = [
            (item.memory_id, memory_text(item), [])
            for item in MemoryItem.objects.filter(invalidated_at__isnull=True).only(
                "memory_id", "namespace", "key", "value"
            )
        ]

    def keeper(query: str, groups: list[str] | None) -> list[Any]:
        with tenant_scope(tenant.tenant_id):
            return text_candidates(tenant=tenant, query=query, limit=CANDIDATES, valid_at=timezone.now())

    return tantivy_reference(docs, [(q, None) for q in queries], keeper, CANDIDATES)


def memory_search_figures(
    *, tenants: list[Tenant], queries: int, rng: random.Random, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The figures over seeded tenants (one per SHARES entry, largest first)."""
    embedder = HashingEmbedder()
    asked = [
        (rng.choices(tenants, weights=SHARES)[0], " ".join(rng.choices(WORDS, k=4))) for _ in range(queries)
    ]
    hybrid, one_connection = [], []
    for tenant, query in asked:  # beside the search with both arms on one connection, interleaved
        t0 = time.perf_counter()
        memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
        t1 = time.perf_counter()
        with override_settings(KEEPER_SEARCH_PARALLEL_ARMS=False):
            memory_search(tenant=tenant, query=query, k=10, embedder=embedder)
        hybrid.append((t1 - t0) * 1000)
        one_connection.append((time.perf_counter() - t1) * 1000)
    by_vector, by_text, by_ts_rank = _arm_times(asked, embedder)
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
        "hybrid_one_connection_p50_ms": round(percentile(one_connection, 0.5), 2),
        "vector_p50_ms": round(percentile(by_vector, 0.5), 2),
        "vector_p99_ms": round(percentile(by_vector, 0.99), 2),
        "text_p50_ms": round(percentile(by_text, 0.5), 2),
        "text_p99_ms": round(percentile(by_text, 0.99), 2),
        "text_ts_rank_p50_ms": round(percentile(by_ts_rank, 0.5), 2),
        "text_ts_rank_p99_ms": round(percentile(by_ts_rank, 0.99), 2),
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
    result.update(_tantivy(tenants[0], [q for t, q in asked if t == tenants[0]]))
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
