"""The vector projection of memory items, and hybrid search (vector + full text, rank fusion).

Vectors are derived from memory_items under one embedder (its key names name, version and
dimensions); a search reads only the current embedder's vectors, so dimensions never mix, and
re-projection replaces the others. Everything runs in the tenant's scope, so row-level security
confines every row; pgvector's iterative scan keeps scanning past other tenants' neighbours until
this tenant's top-k is complete (HNSW filters after the index scan).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.digests import canonical_json, sha256_digest
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.embedders import Embedder, embedder_from_settings
from memory.models import MemoryItem, MemoryVector

logger = logging.getLogger(__name__)
RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al.): dampens the weight of top ranks


def memory_text(item: MemoryItem) -> str:
    value = item.value if isinstance(item.value, str) else canonical_json(item.value)
    return f"{item.namespace} {item.key.replace('_', ' ')}: {value}"


def memory_project(*, tenant: Tenant, embedder: Embedder | None = None) -> dict[str, int]:
    """Embed the tenant's current items that lack a vector under this embedder; drop other embedders'
    vectors. Idempotent: a second run embeds nothing."""
    embedder = embedder or embedder_from_settings()
    with tenant_scope(tenant.tenant_id):
        stale, _ = MemoryVector.objects.exclude(embedder_key=embedder.key).delete()
        missing = list(
            MemoryItem.objects.filter(invalidated_at__isnull=True)
            .exclude(vectors__embedder_key=embedder.key)
            .order_by("created_at")
        )
        texts = [memory_text(item) for item in missing]
        vectors = embedder.embed(texts) if texts else []
        MemoryVector.objects.bulk_create(
            [
                MemoryVector(
                    tenant=tenant,
                    memory=item,
                    embedder_key=embedder.key,
                    dimensions=embedder.dimensions,
                    embedding=vector,
                    content_digest=sha256_digest(text),
                )
                for item, text, vector in zip(missing, texts, vectors, strict=True)
            ],
            ignore_conflicts=True,
        )
    if missing and not _tenant_index_exists(tenant, embedder.dimensions):
        task_send(
            name="workers.tasks.index_tenant_vectors", args=[str(tenant.tenant_id), str(embedder.dimensions)]
        )
    return {"embedded": len(missing), "removed_other_embedders": stale}


def _index_name(tenant: Tenant, dimensions: int) -> str:
    return f"memory_vectors_hnsw_{tenant.tenant_id.hex}_{int(dimensions)}"


def _tenant_index_exists(tenant: Tenant, dimensions: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [_index_name(tenant, dimensions)])
        return cursor.fetchone() is not None


def vector_candidates(*, tenant: Tenant, embedder: Embedder, vector: list[float], limit: int) -> list[Any]:
    """Nearest memory ids by cosine distance, within the tenant (call inside its tenant scope).

    The explicit tenant predicate (RLS applies anyway) lets the planner use the tenant's own HNSW
    index (memory_vector_index_ensure): a graph of this tenant's rows only, so other tenants'
    density can neither crowd out its top-k nor show in its latency. Iterative scans finish the job
    where only the shared index exists.
    """
    dims = int(embedder.dimensions)  # an int from the embedder, never user input
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute("SET LOCAL hnsw.ef_search = %s", [max(40, min(limit, 1000))])
        cursor.execute(
            f"""SELECT v.memory_id FROM memory_vectors v
                 WHERE v.tenant_id = %s AND v.embedder_key = %s AND v.dimensions = {dims}
                 ORDER BY v.embedding::vector({dims}) <=> %s::vector({dims}) LIMIT %s""",
            [tenant.tenant_id, embedder.key, str(vector), limit],
        )
        return [row[0] for row in cursor.fetchall()]


def memory_vector_index_ensure(*, tenant: Tenant, dimensions: int) -> bool:
    """Give the tenant its own HNSW index (a partial index on its rows). Needs the owner role: where
    the process has no owner connection, the shared index and iterative scans serve instead."""
    from django.db import connections

    from core.db_router import OWNER_ALIAS

    if OWNER_ALIAS not in connections.databases:
        logger.info("no owner connection: tenant %s keeps the shared vector index", tenant.slug)
        return False
    name = _index_name(tenant, dimensions)
    # CONCURRENTLY: writers go on while it builds (the owner connection is in autocommit).
    with connections[OWNER_ALIAS].cursor() as cursor:
        cursor.execute(
            f"""CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_vectors
                USING hnsw ((embedding::vector({int(dimensions)})) vector_cosine_ops)
                WHERE tenant_id = '{tenant.tenant_id}'::uuid AND dimensions = {int(dimensions)}"""
        )  # the name and predicate come from a UUID and an int, never from user input
    return True


@dataclass(frozen=True)
class MemoryHit:
    item: MemoryItem
    score: float
    vector_rank: int | None
    text_rank: int | None


def memory_search(
    *,
    tenant: Tenant,
    query: str,
    subject_id: str | None = None,
    k: int = 10,
    embedder: Embedder | None = None,
    candidates: int = 50,
) -> list[MemoryHit]:
    """Current claims most relevant to the query: vector and full-text rankings fused by RRF."""
    embedder = embedder or embedder_from_settings()
    [query_vector] = embedder.embed([query])
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        valid = MemoryItem.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now), invalidated_at__isnull=True
        )
        if subject_id is not None:
            valid = valid.filter(subject_id=subject_id)
        by_vector = vector_candidates(
            tenant=tenant, embedder=embedder, vector=query_vector, limit=candidates * 4
        )
        with connection.cursor() as cursor:
            # Any of the words (OR), ranked by how well they match: a recall query, not a filter.
            words = " | ".join(dict.fromkeys(re.findall(r"\w+", query.lower())))
            by_text = []
            if words:
                # The explicit tenant predicate (RLS applies anyway) lets the planner combine the
                # tenant with the text index instead of filtering after the policy.
                cursor.execute(
                    """SELECT memory_id FROM memory_items
                        WHERE tenant_id = %s AND search @@ to_tsquery('simple', %s)
                        ORDER BY ts_rank(search, to_tsquery('simple', %s)) DESC LIMIT %s""",
                    [tenant.tenant_id, words, words, candidates],
                )
                by_text = [row[0] for row in cursor.fetchall()]
        allowed = set(
            valid.filter(memory_id__in=set(by_vector) | set(by_text)).values_list("memory_id", flat=True)
        )
        vector_rank = {m: i + 1 for i, m in enumerate(m for m in by_vector if m in allowed)}
        text_rank = {m: i + 1 for i, m in enumerate(m for m in by_text if m in allowed)}
        scores: dict[Any, float] = {}
        for ranks in (vector_rank, text_rank):
            for memory_id, rank in ranks.items():
                scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
        top = sorted(scores, key=lambda m: (-scores[m], str(m)))[:k]
        items = {i.memory_id: i for i in MemoryItem.objects.filter(memory_id__in=top)}
    return [MemoryHit(items[m], round(scores[m], 6), vector_rank.get(m), text_rank.get(m)) for m in top]


def memory_search_scope(
    *,
    tenant: Tenant,
    query: str,
    scope: QuerySet[MemoryItem],
    limit: int = 10,
    offset: int = 0,
    embedder: Embedder | None = None,
    candidates: int = 50,
) -> list[MemoryHit]:
    """The claims of `scope` (memory.selectors.memory_current_claims) most relevant to the query, by
    the same fusion as memory_search, but ranking inside the scope: a subject's or a namespace's claims
    are not crowded out by the rest of the tenant's. A claim the worker has not embedded yet is found
    by its words only."""
    embedder = embedder or embedder_from_settings()
    [query_vector] = embedder.embed([query])
    depth = max(candidates, offset + limit)
    dims = int(embedder.dimensions)  # an int from the embedder, never user input
    words = " | ".join(dict.fromkeys(re.findall(r"\w+", query.lower())))
    with tenant_scope(tenant.tenant_id):
        scope_sql, scope_params = scope.values("memory_id").query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute("SET LOCAL hnsw.ef_search = %s", [max(40, min(depth, 1000))])
            cursor.execute(
                f"""SELECT v.memory_id FROM memory_vectors v
                     WHERE v.tenant_id = %s AND v.embedder_key = %s AND v.dimensions = {dims}
                       AND v.memory_id IN ({scope_sql})
                     ORDER BY v.embedding::vector({dims}) <=> %s::vector({dims}), v.memory_id LIMIT %s""",
                [tenant.tenant_id, embedder.key, *scope_params, str(query_vector), depth],
            )
            by_vector = [row[0] for row in cursor.fetchall()]
            by_text = []
            if words:
                cursor.execute(
                    f"""SELECT memory_id FROM memory_items
                         WHERE tenant_id = %s AND search @@ to_tsquery('simple', %s)
                           AND memory_id IN ({scope_sql})
                         ORDER BY ts_rank(search, to_tsquery('simple', %s)) DESC, memory_id LIMIT %s""",
                    [tenant.tenant_id, words, *scope_params, words, depth],
                )
                by_text = [row[0] for row in cursor.fetchall()]
        vector_rank = {m: i + 1 for i, m in enumerate(by_vector)}
        text_rank = {m: i + 1 for i, m in enumerate(by_text)}
        scores: dict[Any, float] = {}
        for ranks in (vector_rank, text_rank):
            for memory_id, rank in ranks.items():
                scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
        top = sorted(scores, key=lambda m: (-scores[m], str(m)))[offset : offset + limit]
        items = {i.memory_id: i for i in MemoryItem.objects.filter(memory_id__in=top)}
    return [MemoryHit(items[m], round(scores[m], 6), vector_rank.get(m), text_rank.get(m)) for m in top]
