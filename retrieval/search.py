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

from core.digests import sha256_digest
from core.errors import InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.embedders import Embedder, embedder_from_settings
from memory.postings import Statement, query_words, ranked, ranked_statement
from retrieval.models import Chunk, RetrievalSnapshot
from retrieval.services import USER, UnknownPrincipal, index_version, ttl_cutoff

RRF_K = 60
MAX_K = 100
# The text arm reads every readable posting of the words in one aggregate (memory.postings,
# whole_statement). Rounds that start at a depth per word and prove the top k with a bound stay
# available (depth=N), but with 150,000 chunks they were slower at every depth tried (50 to 2,000:
# p50 29-49 ms against 20 ms whole for a principal reading 40%, 1.3-2.5 against 0.7 ms for one
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


def _where(*, acl: list[str] | None, cutoff: Any, keys: list[UUID] | None = None) -> tuple[str, list[Any]]:
    """The chunk predicates after the tenant's id. With the readable ACL keys, `c.acl_key = ANY(keys)`
    lets the (tenant_id, acl_key) btree find a principal's chunks under row-level security (which
    keeps `&&` off the GIN index); `c.acl && principals` stays beside it as the rule itself."""
    sql = "c.tenant_id = %s AND c.status = 'current'"
    params: list[Any] = []
    if keys is not None:
        sql += " AND c.acl_key = ANY(%s::uuid[])"
        params.append(keys)
    if acl is not None:
        sql += " AND c.acl && %s::text[]"
        params.append(acl)
    if cutoff is not None:
        sql += " AND c.indexed_at >= %s"
        params.append(cutoff)
    return sql, params


def vector_statements(
    cursor: Any,
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    acl: list[str] | None,
    cutoff: Any = None,
    keys: list[UUID] | None = None,
) -> tuple[str, list[Any], str, list[Any]]:
    """The vector arm as (settings, their params, the nearest ids' query, its params): call inside
    the tenant scope with `keys` already read (None only when acl is None, the benchmark's baseline).
    The settings are SET LOCAL, so they end with the caller's transaction."""
    dims = int(embedder.dimensions)  # an int from the embedder, never user input
    where, params = _where(acl=acl, cutoff=cutoff, keys=keys)
    # A principal who reads only a sliver of a large tenant: the graph would have to be walked
    # far past other principals' chunks. Its few chunks are ranked exactly instead (the
    # (tenant_id, acl_key) btree finds them by bitmap; a sort of a few thousand distances is cheap).
    exact = acl is not None and _readable_is_small(cursor, tenant, where, params)
    # The tenant's graph is over half-precision vectors (retrieval.indexes): the walk orders by the
    # halfvec distance, and what it found is ranked again by the exact distance, with a few more
    # candidates than asked so that float16 rounding at the edge cannot push out a true neighbour.
    # The exact path orders by the exact distance from the start. The beam is the pool (120 for 100
    # candidates): with the graph's (m 32, ef_construction 128), recall@100 0.974 for a principal
    # reading 40% of a 150,000-chunk tenant (fused top 10: 0.973), 0.978 at ef_search 200 for a
    # quarter more time; the ACL filter drops rows after the graph, and relaxed-order iterative
    # scanning walks on until enough pass.
    order = "distance, c.id" if exact else f"c.embedding::halfvec({dims}) <=> %s::halfvec({dims})"
    settings = (
        f"SET LOCAL enable_indexscan = {'off' if exact else 'on'}; SET LOCAL hnsw.iterative_scan = relaxed_order;"
        f" SET LOCAL hnsw.ef_search = {int(ef_search(limit))}"
    )
    sql = f"""WITH nearest AS MATERIALIZED (
                SELECT c.id, c.embedding::vector({dims}) <=> %s::vector({dims}) AS distance
                  FROM retrieval_chunks c
                 WHERE {where} AND c.embedder_key = %s AND c.dimensions = {dims}
                 ORDER BY {order} LIMIT %s)
            SELECT id FROM nearest ORDER BY distance, id LIMIT %s"""
    return (
        settings,
        [],
        sql,
        [
            str(vector),
            tenant.tenant_id,
            *params,
            embedder.key,
            *([] if exact else [str(vector)]),
            pool(limit),
            limit,
        ],
    )


def vector_candidates(
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    acl: list[str] | None,
    cutoff: Any = None,
    keys: list[UUID] | None = None,
) -> list[int]:
    """Nearest readable chunks (call inside the tenant scope). acl=None drops the ACL predicate:
    only the benchmark's baseline does that. `keys`: the principal's readable ACL keys if the
    caller has them already (readable_acl_keys)."""
    with connection.cursor() as cursor:
        if acl is not None and keys is None:
            keys = readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl)
        if acl is None:
            keys = None
        elif keys == []:
            return []
        settings, _, sql, params = vector_statements(
            cursor,
            tenant=tenant,
            embedder=embedder,
            vector=vector,
            limit=limit,
            acl=acl,
            cutoff=cutoff,
            keys=keys,
        )
        cursor.execute(settings)
        cursor.execute(sql, params)
        found = [row[0] for row in cursor.fetchall()]
        cursor.execute("SET LOCAL enable_indexscan = on")
        return found


EXACT_BELOW = 2000  # readable chunks under which the vector arm ranks exactly


def ef_search(limit: int) -> int:
    """The graph walk's beam: the pool taken before the exact re-rank (at least 100, at most 1000)."""
    return max(100, min(pool(limit), 1000))


def pool(limit: int) -> int:
    """Candidates taken from the half-precision walk before the exact re-rank keeps `limit`."""
    return limit + max(10, limit // 5)


def _readable_is_small(cursor: Any, tenant: Tenant, where: str, params: list[Any]) -> bool:
    cursor.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM retrieval_chunks c WHERE {where} LIMIT %s) AS readable",
        [tenant.tenant_id, *params, EXACT_BELOW],
    )
    return cursor.fetchone()[0] < EXACT_BELOW


def readable_acl_keys(cursor: Any, *, tenant_id: UUID, acl: list[str]) -> list[UUID]:
    """The keys of the tenant's distinct chunk ACLs this principal set may read (retrieval_acls is
    small: one row per distinct ACL, so this scan costs the same however many chunks there are)."""
    cursor.execute(
        "SELECT acl_key FROM retrieval_acls WHERE tenant_id = %s AND acl && %s::text[] ORDER BY acl_key",
        [tenant_id, acl],
    )
    return [row[0] for row in cursor.fetchall()]


def text_statement(
    *,
    tenant_id: UUID,
    words: list[str],
    keys: list[UUID] | None,
    limit: int,
    cutoff: Any = None,
    depth: int | None = TERM_DEPTH,
) -> Statement:
    """One round of the text arm over retrieval_postings: the ACL (as readable keys) and age filter
    each posting before the top-k, with `=` and `>=` that row-level security lets the btree apply."""
    where = "p.tenant_id = %s"
    params: list[Any] = [tenant_id]
    if keys is not None:
        where += " AND p.acl_key = ANY(%s::uuid[])"
        params.append(keys)
    if cutoff is not None:
        where += " AND p.indexed_at >= %s"
        params.append(cutoff)
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
    keys: list[UUID] | None = None,
) -> list[int]:
    """The readable current chunks ts_rank puts first for any of the query's words (call inside the
    tenant scope), from retrieval_postings (memory.postings): a few btree ranges instead of every
    matching chunk. acl=None drops the ACL predicate (the benchmark's baseline); depth=None reads
    every posting of the words (the exact ranking the benchmark compares with)."""
    words = query_words(query)
    if not words:
        return []
    with connection.cursor() as cursor:
        if acl is not None and keys is None:
            keys = readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl)
        if acl is None:
            keys = None
        elif keys == []:
            return []

        def build(depth: int | None) -> Statement:
            return text_statement(
                tenant_id=tenant.tenant_id, words=words, keys=keys, limit=limit, cutoff=cutoff, depth=depth
            )

        return ranked(cursor, build, limit=limit, depth=depth)


def principal_keys(cursor: Any, *, tenant_id: UUID, principal: str) -> tuple[list[str], list[UUID]]:
    """The principal with its groups and the ACL keys they may read, in one statement (inside the
    tenant scope); unknown principal -> UnknownPrincipal."""
    cursor.execute(
        """SELECT s.acl, ARRAY(SELECT a.acl_key FROM retrieval_acls a
                                WHERE a.tenant_id = %s AND a.acl && s.acl ORDER BY a.acl_key)
             FROM (SELECT ARRAY[principal] || groups AS acl FROM retrieval_principals WHERE principal = %s) AS s""",
        [tenant_id, principal],
    )
    row = cursor.fetchone()
    if row is None:
        raise UnknownPrincipal(
            f"no principal {principal[:80]!r} in this tenant (add it with its groups first)"
        )
    return list(row[0]), list(row[1])


def both_arms(
    cursor: Any,
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    query: str,
    acl: list[str],
    keys: list[UUID],
    cutoff: Any,
    vector_limit: int,
    text_limit: int,
) -> tuple[list[int], list[int]]:
    """Both arms in one round trip (after the count that picks the vector arm's path): the vector
    arm's settings, then one row of two arrays, the nearest chunks and the text arm's best (every
    readable posting of the words: exact, so no further round). Both read the same snapshot."""
    if not keys:
        return [], []
    settings, _, vector_sql, vector_params = vector_statements(
        cursor,
        tenant=tenant,
        embedder=embedder,
        vector=vector,
        limit=vector_limit,
        acl=acl,
        cutoff=cutoff,
        keys=keys,
    )
    words = query_words(query)
    text_sql, text_params = "ARRAY[]::bigint[]", list[Any]()
    if words:
        sql, text_params = text_statement(
            tenant_id=tenant.tenant_id, words=words, keys=keys, limit=text_limit, cutoff=cutoff, depth=None
        )
        text_sql = f"ARRAY(SELECT t.doc FROM ({sql}) AS t(doc, score, unread, unscored) ORDER BY t.score DESC, t.doc)"
    cursor.execute(
        f"{settings};\nSELECT ARRAY({vector_sql}), {text_sql}; SET LOCAL enable_indexscan = on",
        [*vector_params, *text_params],
    )
    while cursor.description is None and cursor.nextset():
        pass  # past the settings' empty results
    by_vector, by_text = cursor.fetchone()
    while cursor.nextset():
        pass  # the reset's empty result
    return list(by_vector), list(by_text)


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
    with tenant_scope(tenant.tenant_id):
        with connection.cursor() as cursor:
            acl, keys = principal_keys(cursor, tenant_id=tenant.tenant_id, principal=principal)
            by_vector, by_text = both_arms(
                cursor,
                tenant=tenant,
                embedder=embedder,
                vector=vector,
                query=query,
                acl=acl,
                keys=keys,
                cutoff=cutoff,
                vector_limit=max(candidates, k) * 2,
                text_limit=max(candidates, k),
            )
        scores = fuse(by_vector, by_text)
        top = sorted(scores, key=lambda c: (-scores[c], c))[:k]
        rows = {c.id: c for c in Chunk.objects.filter(id__in=top)}
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
