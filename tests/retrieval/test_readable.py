"""What a principal may read: retrieval_acls counts each ACL's current chunks in step with every
write that makes a chunk current or not, moves it to another ACL or deletes it (migration 0004's
triggers), and a search reads the principal's keys and counts from those rows in one statement."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from core.tenancy import tenant_scope
from memory.embedders import HashingEmbedder
from retrieval.models import Chunk, ChunkAcl
from retrieval.readable import acl_readable, principal_readable, readable_acl_keys
from retrieval.services import (
    UnknownPrincipal,
    document_acl_set,
    document_delete,
    document_embed,
    document_index,
    index_expire,
    index_reembed,
    principal_set,
)

pytestmark = pytest.mark.django_db


def _paragraph(n: int, document_id: str, version: str) -> str:
    """Sixteen words: one paragraph is one chunk."""
    words = f"refunds for order {n} of {document_id} version {version}".split()
    return " ".join(words + [f"zz{i}" for i in range(16 - len(words))])


def _index(tenant, document_id: str, paragraphs: int, acl: list[str], version: str = "1", wait: bool = True):
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):  # one paragraph a chunk
        return document_index(
            tenant=tenant,
            document_id=document_id,
            source_uri=f"mem://{document_id}",
            source_version=version,
            data="\n\n".join(_paragraph(n, document_id, version) for n in range(paragraphs)).encode(),
            media_type="text/plain",
            acl=acl,
            actor="user:test",
            wait=wait,
        )


def _counts(tenant) -> dict[tuple[str, ...], int]:
    """Each ACL's kept count, beside the count of its current chunks taken now; both must agree."""
    with tenant_scope(tenant.tenant_id):
        kept = {tuple(a.acl): a.chunks for a in ChunkAcl.objects.all() if a.chunks}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT a.acl, count(*) FROM retrieval_chunks c JOIN retrieval_acls a USING (acl_key) "
                "WHERE c.status = 'current' GROUP BY a.acl"
            )
            counted = {tuple(acl): n for acl, n in cursor.fetchall()}
    assert kept == counted
    return kept


SUPPORT, BOTH = ("group:support",), ("group:all", "group:support")


def test_the_counts_follow_embedding_acl_changes_new_versions_and_deletion(tenant):
    pending = _index(tenant, "policy", 3, ["group:support"], wait=False)
    assert _counts(tenant) == {}  # pending chunks are not searchable, so not counted
    with tenant_scope(tenant.tenant_id):
        assert ChunkAcl.objects.count() == 0
    assert document_embed(tenant=tenant, document_pk=pending.document.id) == 3
    _index(tenant, "faq", 2, ["group:support"])
    assert _counts(tenant) == {SUPPORT: 5}
    document_acl_set(
        tenant=tenant, document_id="policy", acl=["group:support", "group:all"], actor="user:test"
    )
    assert _counts(tenant) == {SUPPORT: 2, BOTH: 3}
    _index(tenant, "faq", 4, ["group:all", "group:support"], version="2")  # the old version goes stale
    assert _counts(tenant) == {BOTH: 7}
    document_delete(tenant=tenant, document_id="policy", actor="user:test")
    assert _counts(tenant) == {BOTH: 4}
    document_delete(tenant=tenant, document_id="faq", actor="user:test")
    assert _counts(tenant) == {}


def test_the_counts_follow_expiry_and_reembedding(tenant):
    _index(tenant, "policy", 3, ["group:support"])
    _index(tenant, "faq", 2, ["group:hr"])
    index_reembed(tenant=tenant, embedder=HashingEmbedder(dimensions=64))  # pending, then current again
    assert _counts(tenant) == {SUPPORT: 3, ("group:hr",): 2}
    with tenant_scope(tenant.tenant_id):
        Chunk.objects.filter(document_id_text="policy").update(
            indexed_at=timezone.now() - timezone.timedelta(days=31)
        )
    assert index_expire(tenant=tenant) == 3
    assert _counts(tenant) == {("group:hr",): 2}


def test_counts_are_per_tenant_under_row_level_security(tenant, other_tenant):
    _index(tenant, "policy", 3, ["group:support"])
    _index(other_tenant, "policy", 5, ["group:support"])
    assert _counts(tenant) == {SUPPORT: 3} and _counts(other_tenant) == {SUPPORT: 5}
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        readable = principal_readable(cursor, tenant_id=tenant.tenant_id, principal="user:ann")
    assert (readable.chunks, readable.tenant_chunks, len(readable.keys)) == (3, 3, 1)


def test_a_principal_reads_its_keys_and_counts_in_one_statement(tenant):
    _index(tenant, "policy", 3, ["group:support"])
    _index(tenant, "salaries", 4, ["group:hr"])
    _index(tenant, "handbook", 2, ["group:all", "group:hr"])
    _index(tenant, "gone", 2, ["group:all"])
    document_acl_set(tenant=tenant, document_id="gone", acl=["group:hr"], actor="user:test")
    principal_set(
        tenant=tenant, principal="user:ann", groups=["group:support", "group:all"], actor="user:test"
    )
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        readable = principal_readable(cursor, tenant_id=tenant.tenant_id, principal="user:ann")
        by_acl = {tuple(a.acl): a.acl_key for a in ChunkAcl.objects.all()}
        assert readable.acl == ["user:ann", "group:all", "group:support"]
        # ["group:all"] holds no current chunk since its document moved to hr: left out of the keys.
        assert readable.keys == sorted([by_acl[SUPPORT], by_acl[("group:all", "group:hr")]])
        assert (readable.chunks, readable.tenant_chunks) == (5, 11)
        assert readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=readable.acl) == readable.keys
        assert acl_readable(cursor, tenant_id=tenant.tenant_id, acl=readable.acl) == readable
        with pytest.raises(UnknownPrincipal):
            principal_readable(cursor, tenant_id=tenant.tenant_id, principal="user:nobody")


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_of_one_acls_chunks_keep_its_count(tenant):
    """Four documents with one ACL embedded at once: each statement adds its chunks to the same row
    (the writers take turns on it), so none is lost."""
    barrier, failures = threading.Barrier(4), []

    def ingest(n: int) -> None:
        barrier.wait()
        try:
            _index(tenant, f"doc{n}", 5 + n, ["group:support"])
        except Exception as exc:  # reported below: a thread's exception would pass unnoticed
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ingest, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert _counts(tenant) == {SUPPORT: 5 + 6 + 7 + 8}
