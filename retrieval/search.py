"""Searching the index for a principal, and the snapshots that make a search reproducible.

Tenant (row-level security plus an explicit predicate), ACL, status and age are all filtered in the
SQL that ranks the chunks, so no chunk a principal may not read ever reaches Python. Vector and
full-text rankings are fused by reciprocal rank. Each search stores a retrieval snapshot (chapter
33): a replay reads the snapshot's exact source versions, never a new search, which could return a
different set.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection
from django.utils import timezone

from core import parallel
from core.digests import sha256_digest
from core.errors import InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.embedders import Embedder, embedder_from_settings
from memory.postings import Statement, query_words, ranked, ranked_statement
from retrieval.models import Chunk, RetrievalSnapshot
from retrieval.readable import Readable, UnknownPrincipal, acl_readable, principal_readable, readable_acl_keys
from retrieval.services import USER, index_version, ttl_cutoff
from retrieval.vector_arm import EXACT_BELOW, nearest, vector_arm, vector_statements, vector_walk, walk_again

RRF_K = 60
MAX_K = 100
# The text arm reads every readable posting of the words in one aggregate (text_statement with the
# query's terms, through the (tenant, ACL key, term) btree). Rounds that start at a depth per word and prove the top k with a bound stay
# available (depth=N), but with 150,000 chunks they were slower at every depth tried (50 to 2,000:
# p50 29-49 ms against 20 ms whole, since 15, for a principal reading 40%, 1.3-2.5 against 0.7 ms for one
# reading 0.5%): ts_rank gives a rare word no more weight than a common one, so a query with two
# common words rarely proves its top 50 before most of their postings are read, and a failed round
# costs more than the whole read it leads to.
TERM_DEPTH: int | None = None
MAX_QUERY_CHARS = 4000


@dataclass(frozen=True)
class Hit:
    document_id: str
    source_uri: str
    source_version: str
    chunk_id: str
    content_digest: str
    retrieved_at: str
    score: float
    text: str | None  # None in a replay when the document was deleted since

    def provenance(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "source_uri": self.source_uri,
            "source_version": self.source_version,
            "chunk_id": self.chunk_id,
            "content_digest": self.content_digest,
            "retrieved_at": self.retrieved_at,
            "score": self.score,
        }


@dataclass(frozen=True)
class SearchResult:
    snapshot: RetrievalSnapshot
    hits: list[Hit]


def principal_set_of(*, principal: str) -> list[str]:
    """The principal and its groups, read in the caller's tenant scope; unknown -> UnknownPrincipal."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ARRAY[principal] || groups FROM retrieval_principals WHERE principal = %s", [principal]
        )
        row = cursor.fetchone()
    if row is None:
        raise UnknownPrincipal(
            f"no principal {principal[:80]!r} in this tenant (add it with its groups first)"
        )
    return list(row[0])


def vector_candidates(
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    acl: list[str] | None,
    cutoff: Any = None,
) -> list[int]:
    """Nearest readable chunks (call inside the tenant scope). acl=None drops the ACL predicate:
    only the benchmark's baseline does that."""
    with connection.cursor() as cursor:
        readable = None if acl is None else acl_readable(cursor, tenant_id=tenant.tenant_id, acl=acl)
        if readable is not None and not readable.keys:
            return []
        return vector_arm(
            cursor,
            tenant=tenant,
            embedder=embedder,
            vector=vector,
            limit=limit,
            acl=acl,
            keys=None if readable is None else readable.keys,
            readable=None if readable is None else readable.chunks,
            tenant_chunks=None if readable is None else readable.tenant_chunks,
            cutoff=cutoff,
        )


# The query's words as the postings hold them: the triggers store to_tsvector('simple') lexemes.
TERMS = """SELECT ARRAY(SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('simple', w)))
                        FROM unnest(%s::text[]) AS w ORDER BY 1)"""


def query_terms(cursor: Any, words: list[str]) -> list[str]:
    """The lexemes of the query's words (a round trip of its own: sent as a literal array, the terms
    let the planner size each word's range and reach the postings by ACL key and term at once)."""
    if not words:
        return []
    cursor.execute(TERMS, [words])
    return list(cursor.fetchone()[0])


def text_statement(
    *,
    tenant_id: UUID,
    words: list[str],
    keys: list[UUID] | None,
    limit: int,
    cutoff: Any = None,
    depth: int | None = TERM_DEPTH,
    terms: list[str] | None = None,
) -> Statement:
    """One round of the text arm over retrieval_postings: the ACL (as readable keys) and age filter
    each posting before the top-k, with `=` and `>=` that row-level security lets the btree apply.

    depth=None with the query's `terms` (query_terms): every readable posting of the terms, summed
    per chunk, the exact ranking. Terms and ACL keys are both conditions of the (tenant_id, acl_key,
    term) btree, so only readable postings are read (a principal reading 40% of 150,000 chunks: 15 ms
    against 25 ms for the same sum read by term and filtered by key)."""
    where = "p.tenant_id = %s"
    params: list[Any] = [tenant_id]
    if keys is not None:
        where += " AND p.acl_key = ANY(%s::uuid[])"
        params.append(keys)
    if cutoff is not None:
        where += " AND p.indexed_at >= %s"
        params.append(cutoff)
    if depth is None and terms is not None:
        sql = f"""SELECT p.chunk, (sum(p.impact) / %s)::real AS score, 0.0::float8, NULL::float8
                    FROM retrieval_postings p WHERE {where} AND p.term = ANY(%s::text[])
                   GROUP BY p.chunk ORDER BY score DESC, p.chunk LIMIT %s"""
        return sql, [max(len(terms), 1), *params, terms, limit]
    return ranked_statement(
        table="retrieval_postings",
        id_column="chunk",
        words=words,
        where=where,
        params=params,
        limit=limit,
        depth=depth,
    )


def text_candidates(
    *,
    tenant: Tenant,
    query: str,
    limit: int,
    acl: list[str] | None,
    cutoff: Any = None,
    depth: int | None = TERM_DEPTH,
) -> list[int]:
    """The readable current chunks ts_rank puts first for any of the query's words (call inside the
    tenant scope), from retrieval_postings (memory.postings): a few btree ranges instead of every
    matching chunk. acl=None drops the ACL predicate (the benchmark's baseline); depth=None reads
    every posting of the words (the exact ranking the benchmark compares with)."""
    words = query_words(query)
    if not words:
        return []
    with connection.cursor() as cursor:
        keys = None if acl is None else readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl)
        if keys == []:
            return []

        terms = query_terms(cursor, words) if depth is None else None

        def build(depth: int | None) -> Statement:
            return text_statement(
                tenant_id=tenant.tenant_id,
                words=words,
                keys=keys,
                limit=limit,
                cutoff=cutoff,
                depth=depth,
                terms=terms,
            )

        return ranked(cursor, build, limit=limit, depth=depth)


def exact_text_statement(
    cursor: Any, *, tenant: Tenant, query: str, keys: list[UUID], limit: int, cutoff: Any
) -> Statement | None:
    """The text arm's exact ranking (every readable posting of the query's lexemes) as one statement,
    the lexemes read first on `cursor`; None when the query has no word."""
    words = query_words(query)
    if not words:
        return None
    return text_statement(
        tenant_id=tenant.tenant_id,
        words=words,
        keys=keys,
        limit=limit,
        cutoff=cutoff,
        depth=None,
        terms=query_terms(cursor, words),
    )


def both_arms(
    cursor: Any,
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    query: str,
    readable: Readable,
    cutoff: Any,
    vector_limit: int,
    text_limit: int,
) -> tuple[list[int], list[int]]:
    """Both arms in one round trip: the vector arm's settings, then one row of two arrays, the
    nearest chunks and the text arm's best (every readable posting of the words: exact, so no further
    round). Both read the same snapshot. The principal's counts (`readable`) pick the vector arm's
    walk. Only when a walk without iterating found too few does the vector arm walk again, alone
    (walk_again)."""
    if not readable.keys:
        return [], []
    keys = readable.keys
    walk = vector_walk(limit=vector_limit, readable=readable.chunks, tenant_chunks=readable.tenant_chunks)
    arm = {
        "tenant": tenant,
        "embedder": embedder,
        "vector": vector,
        "limit": vector_limit,
        "acl": readable.acl,
        "cutoff": cutoff,
        "keys": keys,
    }
    setup, vector_sql, vector_params = vector_statements(walk=walk, **arm)
    text_sql, text_params = "ARRAY[]::bigint[]", list[Any]()
    if text := exact_text_statement(
        cursor, tenant=tenant, query=query, keys=keys, limit=text_limit, cutoff=cutoff
    ):
        sql, text_params = text
        text_sql = f"ARRAY(SELECT t.doc FROM ({sql}) AS t(doc, score, unread, unscored) ORDER BY t.score DESC, t.doc)"
    cursor.execute(
        f"{setup};\nSELECT ARRAY({vector_sql}), {text_sql}; SET LOCAL enable_indexscan = on",
        [*vector_params, *text_params],
    )
    while cursor.description is None and cursor.nextset():
        pass  # past the settings' empty results
    by_vector, by_text = cursor.fetchone()
    while cursor.nextset():
        pass  # the reset's empty result
    again = walk_again(walk, found=len(by_vector), limit=vector_limit, readable=readable.chunks)
    return (nearest(cursor, again, arm) if again else list(by_vector)), list(by_text)


# Below EXACT_BELOW readable chunks both arms take a few milliseconds, and the hop to another
# connection (core.parallel) would cost more than it saves.
PARALLEL_FROM = EXACT_BELOW


def arms_in_parallel(
    cursor: Any,
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    query: str,
    readable: Readable,
    cutoff: Any,
    vector_limit: int,
    text_limit: int,
) -> tuple[list[int], list[int]]:
    """both_arms' rankings with the vector arm on a pool thread's connection (core.parallel) and the
    text arm on `cursor` at the same time. The two arms read two snapshots of the index: a chunk
    changed between them is ranked as each found it, and the hits are read again after both."""
    if not readable.keys:
        return [], []
    arm = {
        "embedder": embedder,
        "vector": vector,
        "limit": vector_limit,
        "acl": readable.acl,
        "keys": readable.keys,
        "readable": readable.chunks,
        "tenant_chunks": readable.tenant_chunks,
        "cutoff": cutoff,
    }
    future = parallel.beside(tenant.tenant_id, vector_arm, tenant=tenant, **arm)
    try:
        by_text: list[int] = []
        text = exact_text_statement(
            cursor, tenant=tenant, query=query, keys=readable.keys, limit=text_limit, cutoff=cutoff
        )
        if text:
            cursor.execute(*text)
            by_text = [row[0] for row in cursor.fetchall()]
    finally:
        by_vector = future.result()
    return by_vector, by_text


def fuse(*rankings: list[Any]) -> dict[Any, float]:
    scores: dict[Any, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return scores


def retrieval_search(
    *,
    tenant: Tenant,
    query: str,
    principal: str,
    k: int = 10,
    run_id: UUID | None = None,
    embedder: Embedder | None = None,
    candidates: int = 50,
) -> SearchResult:
    """The k chunks most relevant to the query that this principal may read now, and the snapshot
    that records them."""
    if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query must be 1 to {MAX_QUERY_CHARS} characters", code="invalid_query")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_K}", code="invalid_query")
    if not isinstance(principal, str) or not USER.match(principal):
        raise InvalidInput("principal must be user:<name>", code="invalid_principal")
    embedder = embedder or embedder_from_settings()
    [vector] = embedder.embed([query])
    cutoff, now = ttl_cutoff(), timezone.now()
    alone = parallel.alone()
    with tenant_scope(tenant.tenant_id):
        with connection.cursor() as cursor:
            readable = principal_readable(cursor, tenant_id=tenant.tenant_id, principal=principal)
            both = arms_in_parallel if alone and readable.chunks >= PARALLEL_FROM else both_arms
            by_vector, by_text = both(
                cursor,
                tenant=tenant,
                embedder=embedder,
                vector=vector,
                query=query,
                cutoff=cutoff,
                vector_limit=max(candidates, k) * 2,
                text_limit=max(candidates, k),
                readable=readable,
            )
        scores = fuse(by_vector, by_text)
        top = sorted(scores, key=lambda c: (-scores[c], c))[:k]
        shown = ("document_id_text", "source_uri", "source_version", "chunk_id", "content_digest", "text")
        # The arms' rule again for the k chosen: a chunk deleted, replaced or no longer readable since
        # an arm ranked it (the arms and this read are separate statements) is left out.
        current = Chunk.objects.filter(id__in=top, status="current", acl__overlap=readable.acl)
        if cutoff is not None:
            current = current.filter(indexed_at__gte=cutoff)
        rows = {c.id: c for c in current.only(*shown)}
        top = [c for c in top if c in rows]
        stamp = now.isoformat()
        hits = [
            Hit(
                document_id=rows[c].document_id_text,
                source_uri=rows[c].source_uri,
                source_version=rows[c].source_version,
                chunk_id=rows[c].chunk_id,
                content_digest=rows[c].content_digest,
                retrieved_at=stamp,
                score=round(scores[c], 6),
                text=rows[c].text,
            )
            for c in top
        ]
        snapshot = RetrievalSnapshot.objects.create(
            snapshot_id=f"rs_{uuid.uuid4().hex}",
            tenant=tenant,
            run_id=run_id,
            query_digest=sha256_digest(query),
            index_version=index_version(embedder),
            acl_principal=f"tenant:{tenant.tenant_id}/{principal}",
            k=k,
            hits=[h.provenance() for h in hits],
        )
    return SearchResult(snapshot=snapshot, hits=hits)


def snapshot_get(*, tenant: Tenant, snapshot_id: str) -> RetrievalSnapshot:
    with tenant_scope(tenant.tenant_id):
        snapshot = RetrievalSnapshot.objects.filter(snapshot_id=str(snapshot_id)[:100]).first()
    if snapshot is None:
        raise NotFound(
            f"no retrieval snapshot {str(snapshot_id)[:80]!r} in this tenant", code="snapshot_not_found"
        )
    return snapshot


def snapshot_find(*, tenant: Tenant, run_id: UUID, query: str, principal: str) -> RetrievalSnapshot | None:
    """The run's latest snapshot of this query for this principal, if it searched before."""
    with tenant_scope(tenant.tenant_id):
        return (
            RetrievalSnapshot.objects.filter(
                run_id=run_id,
                query_digest=sha256_digest(query),
                acl_principal=f"tenant:{tenant.tenant_id}/{principal}",
            )
            .order_by("-created_at")
            .first()
        )


def snapshot_replay(*, tenant: Tenant, snapshot: RetrievalSnapshot) -> list[Hit]:
    """The snapshot's hits with the text of exactly the recorded source version and digest, whether
    or not that version is still current. A chunk deleted since (its document was deleted) comes
    back with text None: a replay never substitutes a newer version or searches again."""
    with tenant_scope(tenant.tenant_id):
        keys = [(h["document_id"], h["source_version"], h["chunk_id"]) for h in snapshot.hits]
        rows = {}
        for document_id, version, chunk_id in keys:
            row = (
                Chunk.objects.filter(document_id_text=document_id, source_version=version, chunk_id=chunk_id)
                .values_list("text", "content_digest")
                .first()
            )
            rows[(document_id, version, chunk_id)] = row
    hits = []
    for h, key in zip(snapshot.hits, keys, strict=True):
        row = rows[key]
        text = row[0] if row and row[1] == h["content_digest"] else None
        hits.append(Hit(**{**h, "text": text}))
    return hits


@dataclass(frozen=True)
class SourceChange:
    """A document a snapshot hit names that is gone or has another version now."""

    snapshot_id: str
    document_id: str
    recorded_version: str
    current_version: str | None  # None: the document was deleted

    def describe(self) -> str:
        now = "deleted" if self.current_version is None else f"now version {self.current_version}"
        return f"{self.document_id} (version {self.recorded_version} in {self.snapshot_id}) is {now}"


def snapshot_sources_changed(*, tenant_id: UUID, run_id: UUID) -> list[SourceChange]:
    """Every source behind the run's snapshots that was deleted or replaced by a newer version since
    it was retrieved (one entry per snapshot and document)."""
    from retrieval.models import Document

    with tenant_scope(tenant_id):
        snapshots = list(RetrievalSnapshot.objects.filter(run_id=run_id).order_by("created_at"))
        named = {h.get("document_id") for s in snapshots for h in s.hits or [] if isinstance(h, dict)}
        current = dict(
            Document.objects.filter(document_id__in=[d for d in named if isinstance(d, str)]).values_list(
                "document_id", "source_version"
            )
        )
    changes = []
    for snapshot in snapshots:
        seen: set[str] = set()
        for hit in snapshot.hits or []:
            document_id, version = hit.get("document_id"), hit.get("source_version")
            if not isinstance(document_id, str) or document_id in seen:
                continue
            seen.add(document_id)
            now = current.get(document_id)
            if now != version:
                changes.append(SourceChange(snapshot.snapshot_id, document_id, str(version), now))
    return changes


def snapshots_detach(*, tenant_id: UUID, run_id: UUID, snapshot_ids: list[str]) -> int:
    """Detach these snapshots from the run (kept, by id, for the record): its next search of the same
    query finds no snapshot to replay and retrieves the current versions."""
    with tenant_scope(tenant_id):
        return RetrievalSnapshot.objects.filter(run_id=run_id, snapshot_id__in=snapshot_ids).update(
            run_id=None
        )
