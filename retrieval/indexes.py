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
from core.models import Tenant
from core.tenancy import tenant_scope

logger = logging.getLogger(__name__)
HNSW_FROM_CHUNKS = 2000  # below this an exact scan is as fast and always exact


def chunk_index_name(tenant: Tenant, dimensions: int) -> str:
    return f"retrieval_chunks_hnsw_{tenant.tenant_id.hex}_{int(dimensions)}"


def chunk_index_exists(tenant: Tenant, dimensions: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s", [chunk_index_name(tenant, dimensions)]
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
    """Build the tenant's HNSW index (needs the owner connection; without one, exact scans serve)."""
    if OWNER_ALIAS not in connections.databases:
        logger.info("no owner connection: tenant %s keeps exact chunk scans", tenant.slug)
        return False
    dims = int(dimensions)
    # The name and predicate come from a UUID and an int, never from user input.
    with connections[OWNER_ALIAS].cursor() as cursor:
        # A bulk build is far faster when the graph fits in memory; the setting ends with the session.
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute(
            f"""CREATE INDEX CONCURRENTLY IF NOT EXISTS {chunk_index_name(tenant, dims)} ON retrieval_chunks
                USING hnsw ((embedding::vector({dims})) vector_cosine_ops)
                WHERE tenant_id = '{tenant.tenant_id}'::uuid AND dimensions = {dims} AND status = 'current'"""
        )
    return True


def chunk_index_drop(*, tenant: Tenant, dimensions: int) -> None:
    if OWNER_ALIAS in connections.databases:
        with connections[OWNER_ALIAS].cursor() as cursor:
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {chunk_index_name(tenant, int(dimensions))}")
