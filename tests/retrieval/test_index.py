"""Indexing documents: idempotent per version, invalidated at once on change, tombstoned on delete,
never half-indexed, and fenced by row-level security."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from core.tenancy import tenant_scope
from memory.embedders import HashingEmbedder
from retrieval.models import Chunk, ChunkStatus, Document, DocumentStatus, DocumentTombstone, Invalidation
from retrieval.search import retrieval_search
from retrieval.services import (
    DocumentDeleted,
    SourceVersionConflict,
    document_delete,
    document_embed,
    document_index,
    index_expire,
    index_reembed,
    principal_set,
)
from retrieval.sources import DocumentEmpty, DocumentTooLarge, DocumentUnreadable
from tests.conftest import no_tenant

pytestmark = pytest.mark.django_db

POLICY_V1 = b"""# Refund policy

Refunds are paid within 14 days of the request.

## Exceptions

Gift cards are never refunded.
"""
POLICY_V2 = POLICY_V1.replace(b"14 days", b"30 days")


def index(tenant, data=POLICY_V1, version="etag:1", document_id="policy-42", acl=("group:support",), **kw):
    return document_index(
        tenant=tenant,
        document_id=document_id,
        source_uri=f"s3://kb/{document_id}.md",
        source_version=version,
        data=data,
        media_type="text/markdown",
        acl=list(acl),
        actor="user:test",
        wait=True,
        **kw,
    )


def chunks(tenant, **filters):
    with tenant_scope(tenant.tenant_id):
        return list(Chunk.objects.filter(**filters).order_by("id"))


def test_indexing_stores_chunks_with_provenance_and_embeddings(tenant):
    result = index(tenant)
    assert result.changed and result.chunks == 2 and result.document.status == DocumentStatus.INDEXED
    rows = chunks(tenant)
    assert [c.chunk_id for c in rows] == ["policy-42:s1:c1", "policy-42:s2:c1"]
    assert {c.status for c in rows} == {ChunkStatus.CURRENT}
    assert all(c.source_version == "etag:1" and c.content_digest.startswith("sha256:") for c in rows)
    assert all(c.acl == ["group:support"] and c.embedding is not None for c in rows)
    assert result.document.index_version == f"chunker-v1/{HashingEmbedder().key}"


def test_indexing_the_same_version_twice_changes_nothing(tenant):
    index(tenant)
    before = [(c.id, c.content_digest, c.indexed_at) for c in chunks(tenant)]
    again = index(tenant)
    assert not again.changed and again.invalidated == 0
    assert [(c.id, c.content_digest, c.indexed_at) for c in chunks(tenant)] == before
    with tenant_scope(tenant.tenant_id):
        assert Invalidation.objects.count() == 0


def test_the_same_version_with_other_content_is_refused(tenant):
    index(tenant)
    with pytest.raises(SourceVersionConflict, match="one content"):
        index(tenant, data=POLICY_V2)
    assert {c.content_digest for c in chunks(tenant)} == {
        c.content_digest for c in chunks(tenant, status="current")
    }


def test_a_new_version_makes_the_old_chunks_stale_in_the_same_transaction(tenant):
    index(tenant)
    # Not embedded yet (wait=False, no worker): the old version is stale at once, the new one pending.
    result = document_index(
        tenant=tenant,
        document_id="policy-42",
        source_uri="s3://kb/policy-42.md",
        source_version="etag:2",
        data=POLICY_V2,
        media_type="text/markdown",
        acl=["group:support"],
        actor="user:test",
    )
    assert result.invalidated == 2
    assert {c.status for c in chunks(tenant, source_version="etag:1")} == {ChunkStatus.STALE}
    assert all(
        c.embedding is None and c.stale_reason == "document_updated"
        for c in chunks(tenant, source_version="etag:1")
    )
    assert {c.status for c in chunks(tenant, source_version="etag:2")} == {ChunkStatus.PENDING}
    with tenant_scope(tenant.tenant_id):
        event = Invalidation.objects.get()
    assert (event.kind, event.document_id_text, event.chunks_affected) == ("document_updated", "policy-42", 2)
    assert event.details == {"from_version": "etag:1", "to_version": "etag:2"}
    assert document_embed(tenant=tenant, document_pk=result.document.id) == 2
    assert {c.status for c in chunks(tenant, source_version="etag:2")} == {ChunkStatus.CURRENT}


def test_an_older_version_cannot_replace_a_newer_one(tenant):
    index(tenant)
    index(tenant, data=POLICY_V2, version="etag:2")
    with pytest.raises(SourceVersionConflict, match="older version"):
        index(tenant)
    with tenant_scope(tenant.tenant_id):
        assert Document.objects.get().source_version == "etag:2"


def test_a_chunk_that_went_stale_while_being_embedded_stays_stale(tenant):
    first = document_index(
        tenant=tenant,
        document_id="d",
        source_uri="u",
        source_version="v1",
        data=b"alpha text",
        media_type="text/plain",
        acl=["user:a"],
        actor="user:test",
    )
    index(tenant, data=b"beta text", version="v2", document_id="d")
    document_embed(tenant=tenant, document_pk=first.document.id)  # a late task for v1
    assert {c.status for c in chunks(tenant, source_version="v1")} == {ChunkStatus.STALE}


def test_deleting_a_document_removes_every_chunk_and_leaves_a_tombstone(tenant):
    index(tenant)
    index(tenant, data=POLICY_V2, version="etag:2")
    assert document_delete(tenant=tenant, document_id="policy-42", actor="user:test") == 4
    assert chunks(tenant) == []
    with tenant_scope(tenant.tenant_id):
        tombstone = DocumentTombstone.objects.get()
        assert not Document.objects.exists()
        assert Invalidation.objects.filter(kind="document_deleted").get().chunks_affected == 4
    assert len(tombstone.version_digests) == 2
    assert all(d.startswith("sha256:") and "etag" not in d for d in tombstone.version_digests)
    for version in ("etag:1", "etag:2"):  # an old ingestion stream replayed
        with pytest.raises(DocumentDeleted):
            index(tenant, data=POLICY_V2 if version == "etag:2" else POLICY_V1, version=version)
    assert chunks(tenant) == []
    assert index(tenant, data=b"A new policy.", version="etag:3").changed  # a genuinely new version may come


@pytest.mark.parametrize(
    ("data", "media_type", "error"),
    [
        (b"", "text/plain", DocumentEmpty),
        (b"  \n\t ", "text/markdown", DocumentEmpty),
        (bytes(range(256)) * 8, "text/plain", DocumentUnreadable),
        (b"%PDF-1.7 garbage", "application/pdf", DocumentUnreadable),
        (b"x" * 2049, "text/plain", DocumentTooLarge),
    ],
)
def test_bad_sources_are_refused_and_leave_the_current_version_untouched(tenant, data, media_type, error):
    index(tenant, document_id="doc")
    before = [(c.id, c.status) for c in chunks(tenant)]
    with override_settings(KEEPER_RETRIEVAL_MAX_BYTES=2048), pytest.raises(error) as caught:
        document_index(
            tenant=tenant,
            document_id="doc",
            source_uri="u",
            source_version="v9",
            data=data,
            media_type=media_type,
            acl=["user:a"],
            actor="user:test",
        )
    assert caught.value.http_status in (413, 422)
    assert [(c.id, c.status) for c in chunks(tenant)] == before


def test_too_many_chunks_is_refused_with_nothing_written(tenant):
    text = "\n\n".join(f"Paragraph {i} " + "word " * 30 for i in range(50)).encode()
    with (
        override_settings(KEEPER_RETRIEVAL_MAX_CHUNKS=3, KEEPER_RETRIEVAL_CHUNK_WORDS=40),
        pytest.raises(DocumentTooLarge),
    ):
        index(tenant, data=text, document_id="big")
    assert chunks(tenant) == []
    with tenant_scope(tenant.tenant_id):
        assert not Document.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("acl", ["alice"]),
        ("acl", ["user:"]),
        ("acl", "user:a"),
        ("source_version", ""),
        ("source_uri", "x" * 2001),
        ("document_id", "a:b"),
        ("document_id", ""),
    ],
)
def test_bad_fields_are_refused(tenant, field, value):
    fields = {"document_id": "doc", "source_uri": "u", "source_version": "v1", "acl": ["user:a"]}
    fields[field] = value
    with pytest.raises(Exception) as caught:
        document_index(
            tenant=tenant, data=b"text", media_type="text/plain", actor="user:test", wait=True, **fields
        )
    assert getattr(caught.value, "http_status", None) == 422, caught.value
    assert chunks(tenant) == []


def test_an_embedder_change_reembeds_under_a_new_index_version(tenant):
    index(tenant)
    small = HashingEmbedder(dimensions=64)
    assert index_reembed(tenant=tenant, embedder=small) == 2
    rows = chunks(tenant)
    assert {(c.status, c.dimensions, c.embedder_key) for c in rows} == {(ChunkStatus.CURRENT, 64, small.key)}
    with tenant_scope(tenant.tenant_id):
        assert Invalidation.objects.get().kind == "index_version_changed"
    assert index_reembed(tenant=tenant, embedder=small) == 0


def test_entries_older_than_the_ttl_are_not_served_and_are_marked_stale(tenant):
    index(tenant)
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    assert retrieval_search(tenant=tenant, query="refunds", principal="user:ann").hits
    later = timezone.now() + timezone.timedelta(days=31)
    with tenant_scope(tenant.tenant_id):
        Chunk.objects.update(indexed_at=timezone.now() - timezone.timedelta(days=31))
    assert retrieval_search(tenant=tenant, query="refunds", principal="user:ann").hits == []  # read filter
    assert index_expire(tenant=tenant, now=later - timezone.timedelta(days=1)) == 2
    assert {c.stale_reason for c in chunks(tenant)} == {"ttl_expired"}
    assert index(tenant).changed  # the source sends the same version again: indexed anew


def test_without_a_tenant_the_retrieval_tables_show_nothing(tenant):
    index(tenant)
    with no_tenant(), connection.cursor() as cursor:
        for table in ("retrieval_documents", "retrieval_chunks", "retrieval_invalidations"):
            cursor.execute(f"SELECT count(*) FROM {table}")
            assert cursor.fetchone() == (0,), table
        cursor.execute("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'retrieval_chunks'")
        assert cursor.fetchone() == (True,)
