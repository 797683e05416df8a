"""Retrieval at scale: search latency with the ACL predicate beside the same queries without it, each
arm's p50/p99 (and the text arm as it was, ts_rank over every readable match, beside it), recall@10
of each arm and of the fused result against exact rankings, for a principal who reads 40% of the
tenant and for one who reads half a percent of it; with the `peers` extra, tantivy's BM25 beside."""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test import override_settings

from bench.memory import WORD, percentile, tantivy_reference, vacuum
from core.models import Tenant
from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from retrieval.indexes import chunk_index_drop, chunk_index_ensure
from retrieval.models import (
    Chunk,
    ChunkAcl,
    Document,
    DocumentTombstone,
    Invalidation,
    Principal,
    RetrievalSnapshot,
)
from retrieval.readable import acl_readable
from retrieval.search import both_arms, fused, principal_set_of, retrieval_search, vector_candidates
from retrieval.services import document_index, principal_set
from retrieval.text_arm import text_candidates

SEARCH_CANDIDATES = 50  # retrieval_search asks the vector arm for 50 candidates (beside the text arm
# there; here each arm is timed alone), its walk's beam sized for the first 30 of them
# (retrieval.vector_arm.WALKED_SHARE).
TEXT_CANDIDATES = 50  # and the text arm for 50
SHARES = [75, 20, 5]  # percent of the chunks per tenant
CHUNKS_PER_DOCUMENT = 100
GROUPS = [f"group:g{i}" for i in range(20)]  # g0 is rare: one document in 200 carries it
# A Zipf-distributed vocabulary, as in natural text: a few words are everywhere, most are rare. A
# handful of words repeated in every chunk would make every full-text query match half the corpus.
VOCABULARY = [
    f"{a}{b}{c}"
    for a in (
        "ref",
        "ord",
        "par",
        "inv",
        "car",
        "pol",
        "war",
        "ret",
        "shi",
        "acc",
        "sup",
        "cou",
        "del",
        "add",
        "bil",
        "pay",
        "tax",
        "fee",
        "bag",
        "box",
    )
    for b in ("a", "e", "i", "o", "u", "y", "ar", "en", "is", "ol")
    for c in ("", "s", "ed", "ing", "er", "al", "ion", "ly", "ment", "ness")
]
ZIPF = [1.0 / rank for rank in range(1, len(VOCABULARY) + 1)]


def _words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choices(VOCABULARY, weights=ZIPF, k=k))


def _acl(rng: random.Random, d: int) -> list[str]:
    if d % 200 == 0:
        return ["group:g0"]
    return sorted(set(rng.sample(GROUPS[1:], 2)))


def _seed(tenant: Tenant, chunks: int, rng: random.Random, progress: Callable[[str], None]) -> None:
    documents = max(1, chunks // CHUNKS_PER_DOCUMENT)
    embedder = HashingEmbedder()
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16, KEEPER_RETRIEVAL_MAX_CHUNKS=CHUNKS_PER_DOCUMENT):
        for d in range(documents):
            text = "\n\n".join(_words(rng, 12) for _ in range(CHUNKS_PER_DOCUMENT))
            document_index(
                tenant=tenant,
                document_id=f"doc{d}",
                source_uri=f"bench://{tenant.slug}/doc{d}",
                source_version="1",
                data=text.encode(),
                media_type="text/plain",
                acl=_acl(rng, d),
                actor="bench",
                embedder=embedder,
                wait=True,
            )
            if d and d % max(1, documents // 5) == 0:
                progress(f"retrieval_search: {tenant.slug} {d * CHUNKS_PER_DOCUMENT}/{chunks} chunks")
    principal_set(tenant=tenant, principal="user:typical", groups=GROUPS[1:5], actor="bench")
    principal_set(tenant=tenant, principal="user:rare", groups=["group:g0"], actor="bench")


def _candidates(tenant: Tenant, embedder: HashingEmbedder, query: str, *, acl: list[str] | None) -> list[int]:
    [vector] = embedder.embed([query])
    with tenant_scope(tenant.tenant_id):
        by_vector = vector_candidates(
            tenant=tenant, embedder=embedder, vector=vector, limit=SEARCH_CANDIDATES, acl=acl
        )
        by_text = text_candidates(tenant=tenant, query=query, limit=TEXT_CANDIDATES, acl=acl)
    return by_vector + by_text


def _distances(
    tenant: Tenant,
    embedder: HashingEmbedder,
    vector: list[float],
    acl: list[str],
    ids: list[int] | None = None,
    limit: int = 10,
) -> list[tuple[int, float]]:
    """Exact cosine distances: of the given chunks, or (ids=None) the exact top `limit` of what the
    principal may read, by a sequential scan with no graph."""
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(
            f"""SELECT id, c.embedding::vector(256) <=> %s::vector(256) AS d FROM retrieval_chunks c
                 WHERE c.tenant_id = %s AND c.status = 'current' AND c.acl && %s::text[] AND c.embedder_key = %s
                   AND c.dimensions = 256 {"AND c.id = ANY(%s)" if ids is not None else ""}
                 ORDER BY d, c.id LIMIT %s""",
            [str(vector), tenant.tenant_id, acl, embedder.key, *([ids] if ids is not None else []), limit],
        )
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _recall(
    tenant: Tenant, embedder: HashingEmbedder, principal: str, rng: random.Random, n: int
) -> dict[str, float]:
    """recall@10 against exact rankings of what the principal may read. The vector arm's top 10,
    asked as retrieval_search asks it (50 candidates), against a sequential scan: hashed short texts
    tie often, so a returned chunk counts when it is as near as the exact 10th (another chunk at the
    same distance is not a miss). The text arm's top 10 against every readable posting of the words
    ranked (exact=True: the same idf-weighted scores over every match). The fused top 10 (both arms as
    retrieval_search asks them, the text candidates the walk missed placed by distance) against the
    fusion of those two exact rankings; fused_deep the same top 10 against the fusion with the exact
    vector ranking twice as deep, the depth retrieval_search's docstring weighs against its own (how
    much the answer moves with the definition, not a miss of the walk)."""
    with tenant_scope(tenant.tenant_id):
        acl = principal_set_of(principal=principal)
    found: dict[str, list[float]] = {"vector": [], "text": [], "fused": [], "fused_deep": []}
    for _ in range(n):
        query = _words(rng, 4)
        [vector] = embedder.embed([query])
        deep = _distances(tenant, embedder, vector, acl, limit=2 * SEARCH_CANDIDATES)
        exact = deep[:SEARCH_CANDIDATES]
        with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
            by_vector = vector_candidates(
                tenant=tenant, embedder=embedder, vector=vector, limit=SEARCH_CANDIDATES, acl=acl
            )
            by_text = text_candidates(tenant=tenant, query=query, limit=TEXT_CANDIDATES, acl=acl)
            exact_text = text_candidates(
                tenant=tenant, query=query, limit=TEXT_CANDIDATES, acl=acl, exact=True
            )
            # The two rankings retrieval_search fuses: the vector arm's with the text arm's candidates
            # it missed placed by their distance (both_arms ranks as the parallel arms do).
            fused_vector, fused_text = both_arms(
                cursor,
                tenant=tenant,
                embedder=embedder,
                vector=vector,
                query=query,
                readable=acl_readable(cursor, tenant_id=tenant.tenant_id, acl=acl),
                cutoff=None,
                vector_limit=SEARCH_CANDIDATES,
                text_limit=TEXT_CANDIDATES,
            )
        if exact_text:
            found["text"].append(len(set(by_text[:10]) & set(exact_text[:10])) / len(exact_text[:10]))
        if exact:
            tenth = exact[:10][-1][1]
            got = by_vector[:10]
            near = sum(1 for _, d in _distances(tenant, embedder, vector, acl, ids=got) if d <= tenth + 1e-6)
            found["vector"].append(min(near, len(exact[:10])) / len(exact[:10]))
        got_fused, exact_fused = (
            fused(fused_vector, fused_text, 10)[1],
            fused([c for c, _ in exact], exact_text, 10)[1],
        )
        if exact_fused:
            found["fused"].append(len(set(got_fused) & set(exact_fused)) / len(exact_fused))
        deep_fused = fused([c for c, _ in deep], exact_text, 10)[1]
        if deep_fused:
            found["fused_deep"].append(len(set(got_fused) & set(deep_fused)) / len(deep_fused))
    return {arm: round(statistics.mean(values), 3) for arm, values in found.items() if values}


# The text arm before postings (ts_rank over every readable match, which RLS keeps off the GIN and
# ACL indexes): timed beside the postings arm in the same run, so both share the machine's load.
TS_RANK_TEXT = """
    SELECT c.id FROM retrieval_chunks c
     WHERE c.tenant_id = %s AND c.status = 'current' AND c.acl && %s::text[]
       AND c.search @@ to_tsquery('simple', %s)
     ORDER BY ts_rank(c.search, to_tsquery('simple', %s)) DESC, c.id LIMIT %s"""


def _arm_times(
    tenant: Tenant, embedder: HashingEmbedder, asked: list[str], acl: list[str]
) -> tuple[list[float], list[float], list[float]]:
    """Each arm as retrieval_search calls it, timed alone inside the tenant's scope, and the text arm
    without postings (ts_rank over every match), interleaved."""
    by_vector, by_text, by_ts_rank = [], [], []
    for query in asked:
        [vector] = embedder.embed([query])
        words = " | ".join(dict.fromkeys(WORD.findall(query.lower())))
        with tenant_scope(tenant.tenant_id):
            t0 = time.perf_counter()
            vector_candidates(
                tenant=tenant, embedder=embedder, vector=vector, limit=SEARCH_CANDIDATES, acl=acl
            )
            t1 = time.perf_counter()
            text_candidates(tenant=tenant, query=query, limit=TEXT_CANDIDATES, acl=acl)
            t2 = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(TS_RANK_TEXT, [tenant.tenant_id, acl, words, words, TEXT_CANDIDATES])
                cursor.fetchall()
            t3 = time.perf_counter()
        by_vector.append((t1 - t0) * 1000)
        by_text.append((t2 - t1) * 1000)
        by_ts_rank.append((t3 - t2) * 1000)
    return by_vector, by_text, by_ts_rank


def bench_retrieval_search(*, chunks: int, queries: int, progress: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(44)
    embedder = HashingEmbedder()
    tenants = [tenant_ensure(slug=f"bench-rag-{i}") for i in range(len(SHARES))]
    sizes = [max(CHUNKS_PER_DOCUMENT, int(chunks * share / 100)) for share in SHARES]
    try:
        started = time.perf_counter()
        for tenant, size in zip(tenants, sizes, strict=True):
            _seed(tenant, size, rng, progress)
            chunk_index_ensure(tenant=tenant, dimensions=embedder.dimensions)
        vacuum(["retrieval_chunks", "retrieval_postings", "retrieval_acls"])
        progress(
            f"retrieval_search: {sum(sizes)} chunks seeded and indexed in {time.perf_counter() - started:.0f} s"
        )
        figures = retrieval_search_figures(tenants=tenants, queries=queries, rng=rng, progress=progress)
        return {"chunks": sum(sizes), **figures}  # as asked; chunks_indexed says how many are current
    finally:
        for tenant in tenants:
            chunk_index_drop(tenant=tenant, dimensions=embedder.dimensions)
            with tenant_scope(tenant.tenant_id):
                for model in (
                    Chunk,
                    ChunkAcl,
                    Document,
                    Principal,
                    Invalidation,
                    RetrievalSnapshot,
                    DocumentTombstone,
                ):
                    model.objects.all().delete()


def _tantivy(tenant: Tenant, asked: list[str], acl: list[str]) -> dict[str, Any]:
    """tantivy beside the text arm: the largest tenant's current chunks with their ACLs, the typical
    principal's queries."""
    with tenant_scope(tenant.tenant_id):
        docs = list(Chunk.objects.filter(status="current").values_list("id", "text", "acl"))

    def keeper(query: str, groups: list[str] | None) -> list[Any]:
        with tenant_scope(tenant.tenant_id):
            return text_candidates(tenant=tenant, query=query, limit=TEXT_CANDIDATES, acl=groups)

    return tantivy_reference(docs, [(q, acl) for q in asked], keeper, TEXT_CANDIDATES)


def retrieval_search_figures(
    *, tenants: list[Tenant], queries: int, rng: random.Random, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The figures over seeded tenants (one per SHARES entry, largest first)."""
    embedder = HashingEmbedder()
    total_chunks = 0
    for tenant in tenants:
        with tenant_scope(tenant.tenant_id):
            total_chunks += Chunk.objects.filter(status="current").count()
    big = tenants[0]
    asked = [_words(rng, 4) for _ in range(queries)]
    full, rare_full, one_connection = [], [], []
    for query in asked:  # the search beside itself with both arms on one connection, interleaved
        t0 = time.perf_counter()
        retrieval_search(tenant=big, query=query, principal="user:typical", k=10, embedder=embedder)
        t1 = time.perf_counter()
        retrieval_search(tenant=big, query=query, principal="user:rare", k=10, embedder=embedder)
        t2 = time.perf_counter()
        with override_settings(KEEPER_SEARCH_PARALLEL_ARMS=False):
            retrieval_search(tenant=big, query=query, principal="user:typical", k=10, embedder=embedder)
        full.append((t1 - t0) * 1000)
        rare_full.append((t2 - t1) * 1000)
        one_connection.append((time.perf_counter() - t2) * 1000)
    with tenant_scope(big.tenant_id):
        acl = principal_set_of(principal="user:typical")
        rare_acl = principal_set_of(principal="user:rare")
    with_acl, without_acl = [], []
    for query in asked:  # interleaved, so both see the same cache and load
        t0 = time.perf_counter()
        _candidates(big, embedder, query, acl=acl)
        t1 = time.perf_counter()
        _candidates(big, embedder, query, acl=None)
        with_acl.append((t1 - t0) * 1000)
        without_acl.append((time.perf_counter() - t1) * 1000)
    by_vector, by_text, by_ts_rank = _arm_times(big, embedder, asked, acl)
    rare_vector, rare_text, rare_ts_rank = _arm_times(big, embedder, asked, rare_acl)
    with tenant_scope(big.tenant_id):
        total = Chunk.objects.filter(status="current").count()
        typical = Chunk.objects.filter(status="current", acl__overlap=acl).count()
        rare = Chunk.objects.filter(status="current", acl__overlap=rare_acl).count()
    typical_recall = _recall(big, embedder, "user:typical", rng, 30)
    rare_recall = _recall(big, embedder, "user:rare", rng, 30)

    def ms(values: list[float], q: float) -> float:
        return round(percentile(values, q), 2)

    result = {
        "chunks_indexed": total_chunks,
        "tenants": len(tenants),
        "largest_tenant_chunks": total,
        "queries": queries,
        "typical_principal_reads": typical,
        "rare_principal_reads": rare,
        "search_p50_ms": ms(full, 0.5),
        "search_p99_ms": ms(full, 0.99),
        "search_one_connection_p50_ms": ms(one_connection, 0.5),
        "rare_search_p50_ms": ms(rare_full, 0.5),
        "rare_search_p99_ms": ms(rare_full, 0.99),
        "vector_p50_ms": ms(by_vector, 0.5),
        "vector_p99_ms": ms(by_vector, 0.99),
        "text_p50_ms": ms(by_text, 0.5),
        "text_p99_ms": ms(by_text, 0.99),
        "rare_vector_p50_ms": ms(rare_vector, 0.5),
        "rare_vector_p99_ms": ms(rare_vector, 0.99),
        "rare_text_p50_ms": ms(rare_text, 0.5),
        "rare_text_p99_ms": ms(rare_text, 0.99),
        "text_ts_rank_p50_ms": ms(by_ts_rank, 0.5),
        "text_ts_rank_p99_ms": ms(by_ts_rank, 0.99),
        "rare_text_ts_rank_p50_ms": ms(rare_ts_rank, 0.5),
        "rare_text_ts_rank_p99_ms": ms(rare_ts_rank, 0.99),
        "acl_p50_ms": ms(with_acl, 0.5),
        "acl_p99_ms": ms(with_acl, 0.99),
        "no_acl_p50_ms": ms(without_acl, 0.5),
        "no_acl_p99_ms": ms(without_acl, 0.99),
        "ratio_p50": round(percentile(with_acl, 0.5) / percentile(without_acl, 0.5), 2),
        "recall_at_10_typical": typical_recall["vector"],
        "recall_at_10_rare": rare_recall["vector"],
        **{f"recall_at_10_{arm}_typical": value for arm, value in typical_recall.items() if arm != "vector"},
        **{f"recall_at_10_{arm}_rare": value for arm, value in rare_recall.items() if arm != "vector"},
        **_tantivy(big, asked, acl),
        # Wall-clock figures on a shared machine are only as quiet as this (1-minute load, at the end).
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    progress(
        f"retrieval_search: p50 {result['acl_p50_ms']} ms with ACL, {result['no_acl_p50_ms']} ms without; "
        f"search {result['search_p50_ms']} / rare {result['rare_search_p50_ms']}; "
        f"recall@10 {typical_recall} / rare {rare_recall}"
    )
    return result
