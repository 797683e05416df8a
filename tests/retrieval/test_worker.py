"""Embedding runs in real Celery workers: a document becomes searchable without waiting in the
request, and one whose worker was killed mid-way, or whose task was lost, is finished by beat."""

from __future__ import annotations

import pytest
from django.test import override_settings

from core.tenancy import tenant_scope
from retrieval.models import Chunk, Document, DocumentStatus
from retrieval.search import retrieval_search
from retrieval.services import document_index, principal_set
from tests.processes import flush_redis, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TEXT = "\n\n".join(
    f"Section {i}: refunds for order {i} are paid within {i} days." for i in range(40)
).encode()


def _status(tenant, document_id: str) -> str | None:
    with tenant_scope(tenant.tenant_id):
        return Document.objects.filter(document_id=document_id).values_list("status", flat=True).first()


def _index(tenant, document_id: str):
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):  # one paragraph a chunk
        return document_index(
            tenant=tenant,
            document_id=document_id,
            source_uri=f"s3://kb/{document_id}",
            source_version="v1",
            data=TEXT,
            media_type="text/plain",
            acl=["group:support"],
            actor="user:test",
        )


def test_a_worker_embeds_the_document_after_the_request_returned(tenant, processes):
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    processes.worker()
    result = _index(tenant, "policy")
    assert result.document.status == DocumentStatus.INDEXING and result.chunks == 40
    wait_until(
        lambda: _status(tenant, "policy") == DocumentStatus.INDEXED,
        timeout=30,
        message="the document indexed",
    )
    hits = retrieval_search(tenant=tenant, query="refunds order 7", principal="user:ann", k=3).hits
    assert hits and hits[0].chunk_id == "policy:s1:c8"  # paragraph 7 is the 8th chunk


def test_a_worker_killed_mid_embedding_and_a_lost_task_are_finished_by_beat(tenant, processes, tmp_path):
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    # No worker yet: the embed task waits in Redis, and the flush loses it.
    lost = _index(tenant, "lost")
    flush_redis()
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    env = {
        "KEEPER_CRASH_AT": "after_embed_batch",
        "KEEPER_CRASH_ONCE_DIR": str(crashes),
        "KEEPER_RETRIEVAL_SWEEP_INTERVAL": "1",
    }
    # Prefork: the crash point kills the pool's child process (os._exit); its parent starts a new one.
    processes.worker(env=env)
    crashed = _index(tenant, "crashed")
    wait_until(lambda: any(crashes.iterdir()), timeout=30, message="the worker to crash after a batch")
    processes.beat(env)
    for document in (lost.document, crashed.document):
        wait_until(
            lambda d=document: _status(tenant, d.document_id) == DocumentStatus.INDEXED,
            timeout=60,
            message=f"{document.document_id} indexed by the sweep",
        )
    with tenant_scope(tenant.tenant_id):
        assert set(Chunk.objects.values_list("status", flat=True)) == {"current"}
        assert Chunk.objects.count() == 80
    assert len(list(crashes.iterdir())) == 2  # each document's embedding was killed once


def test_concurrent_ingestions_of_one_new_document_index_it_once(tenant):
    import threading

    from django.db import connection

    barrier, outcomes = threading.Barrier(4), []

    def ingest() -> None:
        barrier.wait()
        try:
            outcomes.append(_index(tenant, "raced").changed)
        finally:
            connection.close()

    threads = [threading.Thread(target=ingest) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [False, False, False, True]
    with tenant_scope(tenant.tenant_id):
        assert Chunk.objects.count() == 40 and Document.objects.count() == 1
