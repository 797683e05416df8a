"""Each tenant's own HNSW graph over its current chunks (a partial index), built once it is large.

A small tenant is searched by an exact scan of its own rows: perfect recall, and fast at that size.
A large one gets a partial HNSW index on its rows only, built CONCURRENTLY by the owner role in a
task, so other tenants' density never enters its graph, its recall or its latency. The ACL filter
runs on top, with pgvector's iterative scan going on until the principal's top-k is complete.
"""

from __future__ import annotations

import logging

from django.db import connection, connections

from core.db_router import OWNER_ALIAS
from core.index_builds import index_builds_of
from core.models import Tenant
from core.tenancy import tenant_scope

logger = logging.getLogger(__name__)
HNSW_FROM_CHUNKS = 2000  # below this an exact scan is as fast and always exact
# The graph's degree and build beam, over half-precision copies of the vectors. pgvector's defaults
# (16, 64) on full vectors gave a principal reading 40% of a 150,000-chunk tenant recall@100 of 0.90
# at ef_search 400 (the fused top 10: 0.90): hashed short texts are "hard" data (distances crowd
# together), and a sparse graph misses true neighbours however wide the search beam. With (32, 128)
# the same searches reach 0.974-0.978 at ef_search 120-200. On halfvec the graph is smaller (147 MB
# against 195 MB on full vectors at 150,000 chunks) and its walk took 15 ms against 27 ms for the
# same graph on full vectors, at the same recall (the search re-ranks what it found by the exact
# distance). The build takes about 1.5 times as long. Tried beside it on the same 150,000 chunks
# (40 queries, a principal reading 40%, 100 candidates): (16, 200) walked in 12.0 ms against 16.8
# but its fused recall@10 fell to 0.938 (vector recall@10 0.96 against 0.99); (24, 200) took 18.7 ms
# for 0.978. A graph built another way has another name
# (its generation), so the next indexing builds the new one beside it and then drops the old.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 128
GENERATION = 2
EARLIER = ["retrieval_chunks_hnsw_{tenant}_{dims}"]  # the names of earlier generations' graphs


def chunk_index_name(tenant: Tenant, dimensions: int) -> str:
    return f"retrieval_chunks_hnsw_{tenant.tenant_id.hex}_{int(dimensions)}_{GENERATION}"


def _earlier_names(tenant: Tenant, dimensions: int) -> list[str]:
    return [name.format(tenant=tenant.tenant_id.hex, dims=int(dimensions)) for name in EARLIER]


def chunk_index_exists(tenant: Tenant, dimensions: int) -> bool:
    """Whether the tenant's current-generation graph is built and valid (a build that was interrupted
    leaves an invalid index behind, which the next build replaces)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relname = %s AND i.indisvalid",
            [chunk_index_name(tenant, dimensions)],
        )
        return cursor.fetchone() is not None


def chunk_index_wanted(tenant: Tenant, dimensions: int) -> bool:
    """True when the tenant has outgrown exact scans and has no graph for these dimensions yet."""
    if chunk_index_exists(tenant, dimensions):
        return False
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM retrieval_chunks WHERE tenant_id = %s AND status = 'current' "
            "AND dimensions = %s LIMIT %s) AS enough",
            [tenant.tenant_id, int(dimensions), HNSW_FROM_CHUNKS],
        )
        return cursor.fetchone()[0] >= HNSW_FROM_CHUNKS


def chunk_index_ensure(*, tenant: Tenant, dimensions: int) -> bool:
    """Build the tenant's HNSW index (needs the owner connection; without one, exact scans serve),
    then drop an earlier generation's graph of the same tenant: searches use the old graph until the
    new one is valid."""
    if OWNER_ALIAS not in connections.databases:
        logger.info("no owner connection: tenant %s keeps exact chunk scans", tenant.slug)
        return False
    dims = int(dimensions)
    name = chunk_index_name(tenant, dims)
    # The names and predicate come from a UUID and ints, never from user input.
    with connections[OWNER_ALIAS].cursor() as cursor, index_builds_of(cursor, "retrieval_chunks"):
        # Asked only once this build has the turn: tasks queued after each of many documents wait for
        # the one that builds, and must find its graph then, not drop it and build it again.
        if not chunk_index_exists(tenant, dims):
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # an interrupted build's leftover
            # A bulk build is far faster when the graph fits in memory; the setting ends with the session.
            cursor.execute("SET maintenance_work_mem = '512MB'")
            cursor.execute(
                f"""CREATE INDEX CONCURRENTLY {name} ON retrieval_chunks
                    USING hnsw ((embedding::halfvec({dims})) halfvec_cosine_ops)
                    WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})
                    WHERE tenant_id = '{tenant.tenant_id}'::uuid AND dimensions = {dims} AND status = 'current'"""
            )
        for earlier in _earlier_names(tenant, dims):
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {earlier}")
    return True


def chunk_index_drop(*, tenant: Tenant, dimensions: int) -> None:
    if OWNER_ALIAS in connections.databases:
        with connections[OWNER_ALIAS].cursor() as cursor, index_builds_of(cursor, "retrieval_chunks"):
            for name in [chunk_index_name(tenant, int(dimensions)), *_earlier_names(tenant, dimensions)]:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
