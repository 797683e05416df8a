"""core.parallel behind PgBouncer in transaction mode with a pool of three: more searches at once
than the pool has server connections all finish, none holding a server connection inside a
transaction while it waits for a second one (its other arm's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from memory.embedders import HashingEmbedder
from memory.projection import memory_project, memory_search
from memory.services import memory_remember
from retrieval.search import retrieval_search
from tests.memory.test_memory import said
from tests.pooling import POOL_SIZE, pooled_connection
from tests.retrieval.test_search import _six_documents_ann_reads_three

pytestmark = pytest.mark.django_db(transaction=True)

SEARCHES = 3 * POOL_SIZE


def at_once(pooler, search: Callable[[], bool]) -> None:
    """SEARCHES threads start `search` together through the pooler; every one must return True."""
    start = threading.Barrier(SEARCHES)
    found: list[bool] = []
    errors: list[str] = []

    def one() -> None:
        try:
            start.wait(timeout=30)
            found.append(search())
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {str(exc).strip()[:200]}")
        finally:
            connection.close()

    with pooled_connection(pooler):
        t0 = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(SEARCHES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        elapsed = time.monotonic() - t0
    # A search that waited for a second server connection while its first sat idle in transaction
    # waits until PgBouncer's query_wait_timeout (20 s here) drops the waiting client.
    assert not errors, f"{len(errors)} of {SEARCHES} searches failed in {elapsed:.1f} s: {errors[:3]}"
    assert found == [True] * SEARCHES


def test_more_parallel_memory_searches_than_pooled_connections_all_finish(tenant, pgbouncer, settings):
    settings.KEEPER_SEARCH_PARALLEL_ARMS = True  # the default: one arm on core.parallel's own connection
    item = memory_remember(
        tenant=tenant,
        subject_id="cust-1",
        namespace="profile",
        key="contact",
        value="never call by phone, email only",
        provenance=said(),
    )
    memory_project(tenant=tenant)

    def search() -> bool:
        hits = memory_search(tenant=tenant, query="how do we contact the customer by phone", k=3)
        return bool(hits) and hits[0].item.memory_id == item.memory_id

    at_once(pgbouncer, search)


def test_more_parallel_retrieval_searches_than_pooled_connections_all_finish(
    tenant, pgbouncer, settings, monkeypatch
):
    from retrieval import search as retrieval

    settings.KEEPER_SEARCH_PARALLEL_ARMS = True
    monkeypatch.setattr(retrieval, "PARALLEL_FROM", 1)  # 36 readable chunks: the arms apart from one
    _six_documents_ann_reads_three(tenant)

    def search() -> bool:
        hits = retrieval_search(
            tenant=tenant,
            query="refund the parcel by phone",
            principal="user:ann",
            k=8,
            embedder=HashingEmbedder(),
        ).hits
        return len(hits) == 8 and {h.document_id for h in hits} <= {"doc1", "doc3", "doc5"}

    at_once(pgbouncer, search)
