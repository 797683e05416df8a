"""The vector arm's walk for a principal: an exact ranking of the few chunks a principal reads, or a
walk of the tenant's half-precision graph (retrieval.indexes) with a beam sized for the share of the
tenant the principal reads, re-ranked by the exact distance."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from core.models import Tenant
from memory.embedders import Embedder


def chunk_where(
    *, acl: list[str] | None, cutoff: Any, keys: list[UUID] | None = None
) -> tuple[str, list[Any]]:
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


@dataclass(frozen=True)
class Walk:
    """How the vector arm finds its candidates: an exact ranking of every readable chunk, or a walk
    of the tenant's graph with this beam, relaxed-order iterative scanning on or off."""

    exact: bool
    ef_search: int
    iterative: bool


EXACT_BELOW = 2000  # readable chunks under which the vector arm ranks exactly
# The ACL filter drops a walk's unreadable chunks after the graph. pgvector's iterative scan walks on
# in batches of ef_search until enough pass; one walk with a beam wide enough for the share the
# principal reads does the same work cheaper (for a principal reading 40% of a 150,000-chunk tenant,
# ef_search 364 without iterating: 9.5 ms against 12.1 ms, the same recall@100 0.982). The beam is
# sized so that, with the readable chunks spread over the graph, fewer than the pool passing is
# 3 standard deviations out; if fewer do pass (a principal's chunks gathered in one region), the
# arm walks again, iterating. Past this beam, iterating from the pool is cheaper.
MAX_BEAM = 1000
# The beam is sized for the first 60% of the candidates asked, not all of them: the arm's list goes on
# with what the walk found past those, and retrieval_search places the text arm's candidates the walk
# missed by their exact distance (retrieval.search.placed), which is where the ranks past the first
# matter to the fused top 10. Measured over 150,000 chunks for a principal reading 40% (100 queries,
# 100 candidates): a beam for all 100 (ef_search 364) walked in 19.0 ms, fused recall@10 0.964 (0.992
# with the text candidates placed); for 60 (230) in 13.4 ms, 0.985 placed; for 50 (195) in 12.9 ms,
# 0.961 placed. The arm's own recall@10: 0.991, 0.982, 0.974.
# retrieval_search asks it for 50 candidates (both arms to the same depth): a beam for the first 30.
WALKED_SHARE = 0.6


def walked(limit: int) -> int:
    """How many of `limit` candidates the walk's beam is sized to find."""
    return max(1, math.ceil(limit * WALKED_SHARE))


def vector_walk(*, limit: int, readable: int | None, tenant_chunks: int | None) -> Walk:
    """The walk for a principal who may read `readable` of the tenant's `tenant_chunks` current
    chunks (None: no ACL, the benchmark's baseline), its beam sized for the first walked(limit)."""
    if readable is None or tenant_chunks is None:
        return Walk(exact=False, ef_search=ef_search(limit), iterative=True)
    if readable < EXACT_BELOW:
        return Walk(exact=True, ef_search=ef_search(limit), iterative=False)
    share = min(1.0, readable / max(tenant_chunks, 1))
    first = pool(walked(limit))
    passing = first + 3 * math.sqrt(first * (1 - share))
    beam = math.ceil(passing / share)
    if beam > MAX_BEAM:
        return Walk(exact=False, ef_search=ef_search(limit), iterative=True)
    return Walk(exact=False, ef_search=max(ef_search(limit), beam), iterative=False)


def vector_statements(
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    acl: list[str] | None,
    walk: Walk,
    cutoff: Any = None,
    keys: list[UUID] | None = None,
) -> tuple[str, str, list[Any]]:
    """The vector arm as (its settings, the query of the nearest (id, exact distance), its params): call inside the tenant
    scope with `keys` already read (None only when acl is None, the benchmark's baseline). The
    settings are SET LOCAL, so they end with the caller's transaction."""
    dims = int(embedder.dimensions)  # an int from the embedder, never user input
    where, params = chunk_where(acl=acl, cutoff=cutoff, keys=keys)
    # A principal who reads only a sliver of a large tenant: the graph would have to be walked
    # far past other principals' chunks. Its few chunks are ranked exactly instead (the
    # (tenant_id, acl_key) btree finds them by bitmap; a sort of a few thousand distances is cheap).
    # The tenant's graph is over half-precision vectors (retrieval.indexes): the walk orders by the
    # halfvec distance, and what it found is ranked again by the exact distance, with a few more
    # candidates than asked (the pool: 120 for 100) so that float16 rounding at the edge cannot push
    # out a true neighbour. The exact path orders by the exact distance from the start.
    exact = walk.exact
    order = "distance, c.id" if exact else f"c.embedding::halfvec({dims}) <=> %s::halfvec({dims})"
    iterative = "relaxed_order" if walk.iterative else "off"
    settings = (
        f"SET LOCAL enable_indexscan = {'off' if exact else 'on'}; SET LOCAL hnsw.iterative_scan = {iterative};"
        f" SET LOCAL hnsw.ef_search = {int(walk.ef_search)}"
    )
    sql = f"""WITH nearest AS MATERIALIZED (
                SELECT c.id, c.embedding::vector({dims}) <=> %s::vector({dims}) AS distance
                  FROM retrieval_chunks c
                 WHERE {where} AND c.embedder_key = %s AND c.dimensions = {dims}
                 ORDER BY {order} LIMIT %s)
            SELECT id, distance FROM nearest ORDER BY distance, id LIMIT %s"""
    return (
        settings,
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


def walk_again(walk: Walk, *, found: int, limit: int, readable: int) -> Walk | None:
    """The iterating walk, when a walk without iterating found fewer than its beam was sized for of a
    principal who may read more (its chunks were scarcer where the query points than over the whole
    tenant)."""
    if walk.exact or walk.iterative or found >= min(walked(limit), readable):
        return None
    return Walk(exact=False, ef_search=ef_search(limit), iterative=True)


def nearest(cursor: Any, walk: Walk, arm: dict[str, Any]) -> list[tuple[int, float]]:
    """(chunk id, exact distance), nearest first: the settings, the walk and the settings' reset in
    one round trip."""
    settings, sql, params = vector_statements(walk=walk, **arm)
    cursor.execute(f"{settings};\n{sql}; SET LOCAL enable_indexscan = on", params)
    while cursor.description is None and cursor.nextset():
        pass  # past the settings' empty results
    found = [(row[0], float(row[1])) for row in cursor.fetchall()]
    while cursor.nextset():
        pass  # the reset's empty result
    return found


def vector_arm(
    cursor: Any,
    *,
    tenant: Tenant,
    embedder: Embedder,
    vector: list[float],
    limit: int,
    acl: list[str] | None,
    keys: list[UUID] | None,
    readable: int | None,
    tenant_chunks: int | None,
    cutoff: Any = None,
) -> list[tuple[int, float]]:
    """The nearest `limit` chunks a principal may read, with their exact distances (call inside the
    tenant scope): the walk for its share, and the iterating walk if that found too few. acl=None (keys and counts None too) drops
    the ACL predicate: only the benchmark's baseline does that."""
    walk = vector_walk(limit=limit, readable=readable, tenant_chunks=tenant_chunks)
    arm = {
        "tenant": tenant,
        "embedder": embedder,
        "vector": vector,
        "limit": limit,
        "acl": acl,
        "cutoff": cutoff,
        "keys": keys,
    }
    found = nearest(cursor, walk, arm)
    again = None if readable is None else walk_again(walk, found=len(found), limit=limit, readable=readable)
    return nearest(cursor, again, arm) if again else found


def ef_search(limit: int) -> int:
    """The graph walk's beam: the pool taken before the exact re-rank (at least 100, at most 1000)."""
    return max(100, min(pool(limit), 1000))


def pool(limit: int) -> int:
    """Candidates taken from the half-precision walk before the exact re-rank keeps `limit`."""
    return limit + max(10, limit // 5)
