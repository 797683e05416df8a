"""A small tenant's top-k is complete next to a dense one: tenant-scoped HNSW against an exact scan."""

from __future__ import annotations

import math
import random

import pytest
from django.utils import timezone

from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryItem, MemoryVector
from memory.projection import memory_project, memory_vector_index_ensure, vector_candidates
from tests.memory.test_memory import said

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases=["default", "owner"])]

WORDS = [
    f"{a}{b}"
    for a in ("ref", "ord", "pay", "ship", "box", "mail", "city", "lang", "plan", "card")
    for b in ("und", "er", "ment", "ping", "es", "ing", "ly", "ers", "s", "ed")
]


def _seed(tenant, n: int, rng: random.Random) -> None:
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        MemoryItem.objects.bulk_create(
            [
                MemoryItem(
                    tenant=tenant,
                    subject_id=f"s{i % 50}",
                    namespace="profile",
                    key=f"k{i}",
                    value=" ".join(rng.choices(WORDS, k=8)),
                    provenance=said(),
                    valid_from=now,
                )
                for i in range(n)
            ],
            batch_size=2000,
        )


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        (math.sqrt(sum(x * x for x in a)) or 1) * (math.sqrt(sum(y * y for y in b)) or 1)
    )


def test_recall_at_10_of_a_small_tenant_next_to_a_dense_one():
    rng = random.Random(7)
    dense, sparse = tenant_ensure(slug="dense"), tenant_ensure(slug="sparse")
    _seed(dense, 4000, rng)
    _seed(sparse, 60, rng)
    embedder = HashingEmbedder()
    for tenant in (dense, sparse):
        memory_project(tenant=tenant, embedder=embedder)
        assert memory_vector_index_ensure(tenant=tenant, dimensions=embedder.dimensions)
    with tenant_scope(sparse.tenant_id):
        rows = [(v.memory_id, [float(x) for x in v.embedding]) for v in MemoryVector.objects.all()]
    assert len(rows) == 60
    recalls = []
    for _ in range(20):
        [query] = embedder.embed([" ".join(rng.choices(WORDS, k=5))])
        exact = {m for m, _ in sorted(rows, key=lambda r: -_cosine(query, r[1]))[:10]}
        with tenant_scope(sparse.tenant_id):
            got = set(vector_candidates(tenant=sparse, embedder=embedder, vector=query, limit=10))
        recalls.append(len(got & exact) / 10)
    assert sum(recalls) / len(recalls) >= 0.95, recalls


def test_several_tenants_graphs_built_at_once_take_turns_instead_of_deadlocking():
    """Worker threads build several tenants' graphs on one table at the same moment (as at `make
    run`'s start): concurrent builds on one table would wait for each other until PostgreSQL ends one
    with "deadlock detected"; they take turns (core.index_builds) and every graph is built."""
    import threading

    from django.db import connections

    rng = random.Random(8)
    embedder = HashingEmbedder()
    tenants = [tenant_ensure(slug=f"turns-{i}") for i in range(5)]
    for tenant in tenants:
        _seed(tenant, 400, rng)
        memory_project(tenant=tenant, embedder=embedder)
    with connections["owner"].cursor() as cursor:
        for tenant in tenants:  # built by the projection's own task: gone again, to build at once
            cursor.execute(f"DROP INDEX IF EXISTS memory_vectors_hnsw_{tenant.tenant_id.hex}_256")
    start, failures = threading.Barrier(len(tenants)), []

    def build(tenant):
        try:
            start.wait()
            assert memory_vector_index_ensure(tenant=tenant, dimensions=256)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=build, args=(t,)) for t in tenants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    with connections["owner"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = ANY(%s) AND i.indisvalid",
            [[f"memory_vectors_hnsw_{t.tenant_id.hex}_256" for t in tenants]],
        )
        assert cursor.fetchone()[0] == len(tenants)
