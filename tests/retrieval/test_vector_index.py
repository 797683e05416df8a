"""A tenant's own HNSW graph: built once it is large, used by its searches, and still complete for a
principal who may read only a small share of the tenant's chunks (ACL filter after the graph)."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test import override_settings

from core.tenancy import tenant_scope
from memory.embedders import HashingEmbedder
from retrieval import indexes
from retrieval.models import Chunk
from retrieval.search import principal_set_of, vector_candidates
from retrieval.services import document_index, principal_set

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases=["default", "owner"])]

WORDS = [
    f"{a}{b}"
    for a in ("ref", "ord", "pay", "ship", "box", "mail", "city", "lang", "plan", "card")
    for b in ("und", "er", "ment", "ping", "es", "ing", "ly", "ers", "s", "ed")
]


def _seed(tenant, documents: int, paragraphs: int, rng: random.Random) -> None:
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):  # one 10-word paragraph a chunk
        for d in range(documents):
            text = "\n\n".join(" ".join(rng.choices(WORDS, k=10)) for _ in range(paragraphs))
            acl = ["group:rare"] if d == 0 else ["group:common"]
            document_index(
                tenant=tenant,
                document_id=f"doc{d}",
                source_uri=f"mem://doc{d}",
                source_version="1",
                data=text.encode(),
                media_type="text/plain",
                acl=acl,
                actor="user:test",
                wait=True,
            )


def test_a_large_tenant_gets_its_own_graph_and_a_rare_principal_still_gets_a_complete_top_10(
    tenant, other_tenant, monkeypatch
):
    monkeypatch.setattr(indexes, "HNSW_FROM_CHUNKS", 500)
    rng = random.Random(7)
    embedder = HashingEmbedder()
    _seed(tenant, documents=20, paragraphs=150, rng=rng)  # 3,000 chunks; the rare group reads 150
    _seed(other_tenant, documents=2, paragraphs=50, rng=rng)
    principal_set(tenant=tenant, principal="user:rare", groups=["group:rare"], actor="user:test")
    assert indexes.chunk_index_wanted(tenant, 256) and not indexes.chunk_index_wanted(other_tenant, 256)
    assert indexes.chunk_index_ensure(tenant=tenant, dimensions=256)
    assert indexes.chunk_index_exists(tenant, 256) and not indexes.chunk_index_wanted(tenant, 256)
    with tenant_scope(tenant.tenant_id):
        acl = principal_set_of(principal="user:rare")
        readable = [(c.id, list(map(float, c.embedding))) for c in Chunk.objects.filter(acl__overlap=acl)]
        assert len(readable) == 150
        recalls = []
        for _ in range(30):
            [vector] = embedder.embed([" ".join(rng.choices(WORDS, k=4))])
            exact = sorted(
                readable, key=lambda r: (-sum(a * b for a, b in zip(vector, r[1], strict=True)), r[0])
            )
            got = vector_candidates(tenant=tenant, embedder=embedder, vector=vector, limit=10, acl=acl)
            assert {c for c in got} <= {c for c, _ in readable}  # never a chunk the principal may not read
            recalls.append(len(set(got) & {c for c, _ in exact[:10]}) / 10)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            # At 3,000 rows the planner may prefer a scan and a sort (statistics decide); what this
            # checks is that the tenant's partial graph matches the search's predicate and can serve it.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")  # nor another index and a sort
            cursor.execute(
                "EXPLAIN SELECT id FROM retrieval_chunks c WHERE c.tenant_id = %s AND c.status = 'current' "
                "AND c.acl && %s::text[] AND c.embedder_key = %s AND c.dimensions = 256 "
                "ORDER BY c.embedding::vector(256) <=> %s::vector(256) LIMIT 10",
                [tenant.tenant_id, ["group:common"], embedder.key, str(vector)],
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
    assert sum(recalls) / len(recalls) >= 0.95, recalls
    assert indexes.chunk_index_name(tenant, 256) in plan, plan  # the common principal's search uses the graph
    indexes.chunk_index_drop(tenant=tenant, dimensions=256)
    assert not indexes.chunk_index_exists(tenant, 256)
