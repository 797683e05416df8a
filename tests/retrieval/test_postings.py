"""The chunks' full-text postings: written with the chunk, re-keyed with its ACL, gone when it is stale
or deleted, confined by row-level security, ACL-filtered before the top-k, and ranked as ts_rank
ranks every readable match."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test import override_settings

from core.tenancy import tenant_scope
from retrieval.models import Chunk, ChunkAcl, ChunkPosting
from retrieval.search import text_candidates
from retrieval.services import document_acl_set, document_delete, document_index

pytestmark = pytest.mark.django_db


def _index(tenant, document_id: str, text: str, acl: list[str], version: str = "1") -> None:
    """Each paragraph one chunk: padded to the 16 words a chunk holds with words no query asks for
    (ts_rank does not weigh a text's length)."""
    paragraphs = [p.split() for p in text.split("\n\n")]
    text = "\n\n".join(" ".join(p + [f"zz{i}" for i in range(16 - len(p))]) for p in paragraphs)
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):
        document_index(
            tenant=tenant,
            document_id=document_id,
            source_uri=f"mem://{document_id}",
            source_version=version,
            data=text.encode(),
            media_type="text/plain",
            acl=acl,
            actor="user:test",
            wait=True,
        )


def _chunks(document_id: str, status: str = "current") -> set[int]:
    return set(Chunk.objects.filter(document_id_text=document_id, status=status).values_list("id", flat=True))


def _ts_rank_order(tenant, query: str, acl: list[str], limit: int) -> list[int]:
    """The ranking the text arm had before postings: ts_rank over every readable match (scores
    compared to 5 decimals: ts_rank's last float4 digit depends on the order it adds the words in)."""
    words = " | ".join(dict.fromkeys(query.lower().split()))
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """SELECT id FROM retrieval_chunks WHERE status = 'current' AND acl && %s::text[]
                  AND search @@ to_tsquery('simple', %s)
                ORDER BY round(ts_rank(search, to_tsquery('simple', %s))::numeric, 5) DESC, id LIMIT %s""",
            [acl, words, words, limit],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_chunks_postings_follow_its_status_acl_and_deletion(tenant):
    _index(
        tenant, "policy", "refunds are paid within fourteen days\n\nparcels are insured", ["group:support"]
    )
    with tenant_scope(tenant.tenant_id):
        first = _chunks("policy")
        assert len(first) == 2
        assert set(ChunkPosting.objects.filter(term="refunds").values_list("chunk_id", flat=True)) <= first
        assert set(ChunkPosting.objects.values_list("chunk_id", flat=True)) == first
        [support] = ChunkAcl.objects.filter(acl=["group:support"]).values_list("acl_key", flat=True)
        assert set(ChunkPosting.objects.values_list("acl_key", flat=True)) == {support}
    document_acl_set(
        tenant=tenant, document_id="policy", acl=["group:support", "group:all"], actor="user:test"
    )
    with tenant_scope(tenant.tenant_id):
        [both] = ChunkAcl.objects.filter(acl=["group:all", "group:support"]).values_list("acl_key", flat=True)
        assert set(ChunkPosting.objects.values_list("acl_key", flat=True)) == {both}
        with connection.cursor() as cursor:  # the chunk's own key (the vector arm's btree) follows too
            cursor.execute("SELECT DISTINCT acl_key FROM retrieval_chunks WHERE status = 'current'")
            assert cursor.fetchall() == [(both,)]
        assert text_candidates(tenant=tenant, query="refunds", limit=5, acl=["group:all"]) != []
    _index(tenant, "policy", "refunds are paid within thirty days", ["group:support"], version="2")
    with tenant_scope(tenant.tenant_id):
        assert _chunks("policy", "stale") == first  # the old version is kept for replays only
        assert set(ChunkPosting.objects.values_list("chunk_id", flat=True)) == _chunks("policy")
        assert not ChunkPosting.objects.filter(term="parcels").exists()
    document_delete(tenant=tenant, document_id="policy", actor="user:test")
    with tenant_scope(tenant.tenant_id):
        assert not ChunkPosting.objects.exists()


def test_postings_and_acls_honour_row_level_security_across_tenants(tenant, other_tenant):
    _index(tenant, "policy", "refunds are paid within fourteen days", ["group:support"])
    _index(other_tenant, "policy", "refunds are paid within fourteen days", ["group:support"])
    with tenant_scope(tenant.tenant_id):
        mine = _chunks("policy")
        assert set(ChunkPosting.objects.values_list("chunk_id", flat=True)) == mine
        assert set(ChunkAcl.objects.values_list("tenant_id", flat=True)) == {tenant.tenant_id}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM retrieval_postings WHERE tenant_id <> %s", [tenant.tenant_id]
            )
            assert cursor.fetchone() == (0,)
            cursor.execute("SELECT count(*) FROM retrieval_acls WHERE tenant_id <> %s", [tenant.tenant_id])
            assert cursor.fetchone() == (0,)
        assert set(text_candidates(tenant=tenant, query="refunds", limit=10, acl=["group:support"])) == mine
    with tenant_scope(other_tenant.tenant_id):
        theirs = _chunks("policy")
        assert set(ChunkPosting.objects.values_list("chunk_id", flat=True)) == theirs and not theirs & mine


def test_the_acl_filters_before_the_top_k(tenant):
    """Three hundred chunks others may read say the words more often than any of the ten the rare
    principal may read; with a first round of 5 postings a word, it still gets exactly its ten best."""
    crowd = "\n\n".join(f"refund parcel card refund parcel card {n}" for n in range(100))
    for d in range(3):
        _index(tenant, f"crowd{d}", crowd, ["group:others"])
    _index(
        tenant,
        "mine",
        "\n\n".join(f"refund note {n}" for n in range(12)) + "\n\nparcel card refund",
        ["group:g0"],
    )
    with tenant_scope(tenant.tenant_id):
        assert len(_chunks("mine")) == 13 and Chunk.objects.count() == 313
        found = text_candidates(
            tenant=tenant, query="refund parcel card", limit=10, acl=["group:g0"], depth=5
        )
        exact = text_candidates(
            tenant=tenant, query="refund parcel card", limit=10, acl=["group:g0"], depth=None
        )
        assert set(found) <= _chunks("mine") and len(found) == 10
        [best] = Chunk.objects.filter(document_id_text="mine", text__contains="parcel").values_list(
            "id", flat=True
        )
    assert found == exact == _ts_rank_order(tenant, "refund parcel card", ["group:g0"], 10)
    assert found[0] == best


def test_the_text_arm_ranks_as_ts_rank_over_every_readable_match(tenant):
    rng = random.Random(11)
    words = ["refund", "parcel", "late", "city", "oslo", "card", "plan", "phone", "email", "invoice"]
    groups = ["group:a", "group:b", "group:c"]
    for d in range(8):
        paragraphs = [" ".join(rng.choices(words, k=rng.randint(2, 10))) for _ in range(30)]
        _index(tenant, f"d{d}", "\n\n".join(paragraphs), sorted(set(rng.sample(groups, rng.randint(1, 2)))))
    for _ in range(8):
        query = " ".join(rng.sample(words, 3))
        acl = rng.sample(groups, 1)
        exact = _ts_rank_order(tenant, query, acl, 30)
        with tenant_scope(tenant.tenant_id):
            assert text_candidates(tenant=tenant, query=query, limit=30, acl=acl, depth=None) == exact
            assert text_candidates(tenant=tenant, query=query, limit=30, acl=acl) == exact
            assert text_candidates(tenant=tenant, query=query, limit=10, acl=acl, depth=8) == exact[:10]
