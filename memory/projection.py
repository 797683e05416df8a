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
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from core import parallel
from core.digests import canonical_json, sha256_digest
from core.index_builds import index_builds_of
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.embedders import Embedder, embedder_from_settings
from memory.models import MemoryItem, MemoryVector
from memory.postings import Statement, query_words, ranked, ranked_statement

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


def vector_statements(
    *,
    tenant_id: UUID,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    valid_at: datetime | None = None,
    subject_id: str | None = None,
) -> list[Statement]:
    """The statements of vector_candidates, the search last (candidate_statement sends them in one
    round trip with the text arm)."""
    dims = int(embedder.dimensions)  # an int from the embedder, never user input
    join, where = "", ""
    params: list[Any] = []
    if valid_at is not None:
        join = "JOIN memory_items i ON i.memory_id = v.memory_id"
        where = " AND i.invalidated_at IS NULL AND (i.expires_at IS NULL OR i.expires_at > %s)"
        params.append(valid_at)
        if subject_id is not None:
            where += " AND i.subject_id = %s"
            params.append(subject_id)
    return [
        ("SET LOCAL hnsw.iterative_scan = relaxed_order", []),
        ("SET LOCAL hnsw.ef_search = %s", [max(100, min(limit * 2, 1000))]),
        (
            f"""WITH nearest AS MATERIALIZED (
                    SELECT v.memory_id, v.embedding::vector({dims}) <=> %s::vector({dims}) AS distance
                      FROM memory_vectors v {join}
                     WHERE v.tenant_id = %s AND v.embedder_key = %s AND v.dimensions = {dims}{where}
                     ORDER BY distance LIMIT %s)
                SELECT memory_id FROM nearest ORDER BY distance, memory_id""",
            [str(vector), tenant_id, embedder.key, *params, limit],
        ),
    ]


def vector_candidates(
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    valid_at: datetime | None = None,
    subject_id: str | None = None,
) -> list[Any]:
    """Nearest memory ids by cosine distance, within the tenant (call inside its tenant scope).

    The explicit tenant predicate (RLS applies anyway) lets the planner use the tenant's own HNSW
    index (memory_vector_index_ensure): a graph of this tenant's rows only, so other tenants'
    density can neither crowd out its top-k nor show in its latency. Iterative scans finish the job
    where only the shared index exists. With `valid_at`, only claims current then (not invalidated,
    not expired), and of `subject_id` if given, are returned: the filter runs beside the graph scan,
    which goes on until `limit` such claims are found. Relaxed-order scans can return neighbours
    slightly out of order, so the rows found are sorted again by their exact distance.
    """
    statements = vector_statements(
        tenant_id=tenant.tenant_id,
        embedder=embedder,
        vector=vector,
        limit=limit,
        valid_at=valid_at,
        subject_id=subject_id,
    )
    return _run(statements)


# Claims are short (a dozen words) and a tenant's vocabulary is small, so every word of a query is
# common: ts_rank gives a rare word no more weight than a common one, and a round cut at some depth
# per word cannot prove the top k (the best claims are those with the most of the words, anywhere in
# the lists; see memory.postings). The text arm reads every posting of the words in one pass
# (depth None), which is exact and what a cut round ended up doing anyway, minus its bookkeeping.
TERM_DEPTH: int | None = None


def text_statements(
    *,
    tenant_id: UUID,
    query: str,
    limit: int,
    valid_at: datetime,
    subject_id: str | None = None,
    depth: int | None = TERM_DEPTH,
) -> list[Statement]:
    """The statement of one round of text_candidates (none when the query has no word): the claims
    current at `valid_at` (and of `subject_id`), filtered on the posting itself, before the top-k."""
    words = query_words(query)
    if not words:
        return []
    where = "p.tenant_id = %s AND (p.expires_at IS NULL OR p.expires_at > %s)"
    params: list[Any] = [tenant_id, valid_at]
    if subject_id is not None:
        where += " AND p.subject_id = %s"
        params.append(subject_id)
    return [
        ranked_statement(
            table="memory_postings",
            id_column="memory_id",
            words=words,
            where=where,
            params=params,
            limit=limit,
            depth=depth,
        )
    ]


def text_ranked(
    cursor: Any,
    *,
    tenant_id: UUID,
    query: str,
    limit: int,
    valid_at: datetime,
    subject_id: str | None = None,
    depth: int | None = TERM_DEPTH,
) -> list[Any]:
    """text_statements' rounds on a DB-API cursor until the top `limit` is proven (memory.postings)."""
    if not query_words(query):
        return []

    def build(depth: int | None) -> Statement:
        [statement] = text_statements(
            tenant_id=tenant_id,
            query=query,
            limit=limit,
            valid_at=valid_at,
            subject_id=subject_id,
            depth=depth,
        )
        return statement

    return ranked(cursor, build, limit=limit, depth=depth)


def text_candidates(
    *,
    tenant: Tenant,
    query: str,
    limit: int,
    valid_at: datetime,
    subject_id: str | None = None,
    depth: int | None = TERM_DEPTH,
) -> list[Any]:
    """The tenant's claims current at `valid_at` (and of `subject_id` if given) that ts_rank puts
    first for any of the query's words (call inside the tenant scope), read from memory_postings
    (memory.postings): a few btree ranges, not every matching claim."""
    with connection.cursor() as cursor:
        return text_ranked(
            cursor,
            tenant_id=tenant.tenant_id,
            query=query,
            limit=limit,
            valid_at=valid_at,
            subject_id=subject_id,
            depth=depth,
        )


def candidate_statement(
    *,
    tenant_id: UUID,
    embedder: Embedder,
    vector: list[float],
    query: str,
    limit: int,
    valid_at: datetime,
    subject_id: str | None = None,
) -> Statement:
    """Both arms of memory_search in one round trip and one plan: the vector arm's settings, then one
    row of two arrays, the nearest claims (vector_statements) and the best by their words
    (text_statements, every posting of the words: exact, so no further round). Both read the same
    snapshot and filter validity (and the subject) themselves."""
    *settings, (vector_sql, vector_params) = vector_statements(
        tenant_id=tenant_id,
        embedder=embedder,
        vector=vector,
        limit=limit,
        valid_at=valid_at,
        subject_id=subject_id,
    )
    text = text_statements(
        tenant_id=tenant_id, query=query, limit=limit, valid_at=valid_at, subject_id=subject_id, depth=None
    )
    text_sql = "ARRAY[]::uuid[]"
    text_params: list[Any] = []
    if text:
        [(sql, text_params)] = text
        text_sql = f"ARRAY(SELECT t.doc FROM ({sql}) AS t(doc, score, unread, unscored) ORDER BY t.score DESC, t.doc)"
    sql = ";\n".join([*(s for s, _ in settings), f"SELECT ARRAY({vector_sql}), {text_sql}"])
    return sql, [*(p for _, ps in settings for p in ps), *vector_params, *text_params]


def candidates_fetch(cursor: Any, statement: Statement) -> tuple[list[Any], list[Any]]:
    """Send candidate_statement on a DB-API cursor (client-side binding, as Django's: several
    statements in one round trip); the nearest ids and the text arm's ids, best first."""
    sql, params = statement
    cursor.execute(sql, params)
    while cursor.description is None and cursor.nextset():
        pass  # past the settings' empty results
    by_vector, by_text = cursor.fetchone()
    return list(by_vector), list(by_text)


def _run(statements: list[Statement]) -> list[Any]:
    """Send the statements in order; the first column of the last one's rows."""
    with connection.cursor() as cursor:
        return _first_column(cursor, statements)


def _first_column(cursor: Any, statements: list[Statement]) -> list[Any]:
    for sql, params in statements:
        cursor.execute(sql, params)
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
    with connections[OWNER_ALIAS].cursor() as cursor, index_builds_of(cursor, "memory_vectors"):
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


def _fused(
    by_vector: list[Any], by_text: list[Any], *, k: int
) -> tuple[dict[Any, int], dict[Any, int], dict[Any, float], list[Any]]:
    """Each arm's ranks, the RRF scores and the k best (ties by id)."""
    vector_rank = {m: i + 1 for i, m in enumerate(by_vector)}
    text_rank = {m: i + 1 for i, m in enumerate(by_text)}
    scores: dict[Any, float] = {}
    for ranks in (vector_rank, text_rank):
        for memory_id, rank in ranks.items():
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
    top = sorted(scores, key=lambda m: (-scores[m], str(m)))[:k]
    return vector_rank, text_rank, scores, top


def _current_claims(
    memory_ids: list[Any], *, tenant_id: UUID, now: datetime, subject_id: str | None
) -> dict[Any, MemoryItem]:
    """The tenant's claims among these that are current (valid, unexpired, the subject's if named), by
    id: the same rule as the arms', in one plain statement (the ORM's query building cost more than the
    read)."""
    sql = (
        "SELECT * FROM memory_items WHERE tenant_id = %s AND memory_id = ANY(%s::uuid[])"
        " AND invalidated_at IS NULL AND (expires_at IS NULL OR expires_at > %s)"
    )
    params: list[Any] = [tenant_id, list(memory_ids), now]
    if subject_id is not None:
        sql += " AND subject_id = %s"
        params.append(subject_id)
    return {item.memory_id: item for item in MemoryItem.objects.raw(sql, params)}


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
    # Both arms filter validity (and the subject) in SQL, so no invalid claim takes a place in either
    # ranking; the check below stays as the contract's last word. Outside a transaction the vector arm
    # runs on a connection of its own beside the text arm, each arm in a transaction of its own
    # (core.parallel); inside one, both go in one statement.
    alone = parallel.alone()
    if alone:
        vector = vector_statements(
            tenant_id=tenant.tenant_id,
            embedder=embedder,
            vector=query_vector,
            limit=candidates,
            valid_at=now,
            subject_id=subject_id,
        )
        by_text, by_vector = parallel.side_by_side(
            tenant.tenant_id,
            lambda cursor: text_ranked(
                cursor,
                tenant_id=tenant.tenant_id,
                query=query,
                limit=candidates,
                valid_at=now,
                subject_id=subject_id,
                depth=None,
            ),
            lambda cursor: _first_column(cursor, vector),
        )
    with tenant_scope(tenant.tenant_id):
        if not alone:
            statement = candidate_statement(
                tenant_id=tenant.tenant_id,
                embedder=embedder,
                vector=query_vector,
                query=query,
                limit=candidates,
                valid_at=now,
                subject_id=subject_id,
            )
            with connection.cursor() as cursor:
                by_vector, by_text = candidates_fetch(cursor, statement)
        vector_rank, text_rank, scores, top = _fused(by_vector, by_text, k=k)
        items = _current_claims(top, tenant_id=tenant.tenant_id, now=now, subject_id=subject_id)
        if len(items) < len(top):
            # A claim stopped being current between the statements: rank again without it, as if
            # the arms had never seen it.
            allowed = set(
                _current_claims(
                    [*by_vector, *by_text], tenant_id=tenant.tenant_id, now=now, subject_id=subject_id
                )
            )
            vector_rank, text_rank, scores, top = _fused(
                [m for m in by_vector if m in allowed], [m for m in by_text if m in allowed], k=k
            )
            items = _current_claims(top, tenant_id=tenant.tenant_id, now=now, subject_id=subject_id)
            top = [m for m in top if m in items]
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
        vector_rank, text_rank, scores, top = _fused(by_vector, by_text, k=offset + limit)
        top = top[offset:]
        items = {i.memory_id: i for i in MemoryItem.objects.filter(tenant=tenant, memory_id__in=top)}
    return [MemoryHit(items[m], round(scores[m], 6), vector_rank.get(m), text_rank.get(m)) for m in top]
