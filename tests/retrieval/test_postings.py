"""The chunks' full-text postings and their words' counts: written with the chunk, re-keyed with its
ACL, gone when it is stale or deleted, confined by row-level security, ACL-filtered before the top-k,
and ranked exactly as the idf-weighted ts_rank of every readable match ranks them."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test import override_settings

from core.tenancy import tenant_scope
from retrieval.models import Chunk, ChunkAcl, ChunkPosting, ChunkTerm
from retrieval.readable import readable_acl_keys
from retrieval.services import document_acl_set, document_delete, document_index
from retrieval.text_arm import text_arm_statement, text_candidates

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


def _idf_order(tenant, query: str, acl: list[str], limit: int) -> list[int]:
    """The text arm's ranking computed the long way, from the chunks alone: each word's idf from how
    many of the current chunks the principal may read hold it (and how many it may read), times
    ts_rank of the chunk for that word, summed over the words the chunk holds, every readable match
    ranked (as real, then by id)."""
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """WITH w AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('simple', %(q)s))) AS term),
                    readable AS (SELECT * FROM retrieval_chunks WHERE status = 'current' AND acl && %(acl)s::text[]),
                    n AS (SELECT count(*)::float8 AS docs FROM readable),
                    df AS (SELECT w.term, count(*)::float8 AS chunks FROM w JOIN readable c
                             ON c.search @@ to_tsquery('simple', quote_literal(w.term))
                            GROUP BY w.term)
               SELECT c.id, sum(ln(1 + (n.docs - df.chunks + 0.5) / (df.chunks + 0.5))
                                * ts_rank(c.search, to_tsquery('simple', quote_literal(df.term))))::real AS score
                 FROM readable c, df, n
                WHERE c.search @@ to_tsquery('simple', quote_literal(df.term))
                GROUP BY c.id ORDER BY score DESC, c.id LIMIT %(limit)s""",
            {"q": query, "acl": acl, "limit": limit},
        )
        return [row[0] for row in cursor.fetchall()]


def _term_counts(tenant) -> dict[str, int]:
    """Each word's count over all the tenant's ACLs."""
    counts: dict[str, int] = {}
    with tenant_scope(tenant.tenant_id):
        for term, chunks in ChunkTerm.objects.values_list("term", "chunks"):
            counts[term] = counts.get(term, 0) + chunks
    return counts


def _counted_from_chunks(tenant) -> dict[str, int]:
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """SELECT l.lexeme, count(*) FROM retrieval_chunks c CROSS JOIN LATERAL unnest(c.search) l
                WHERE c.status = 'current' GROUP BY l.lexeme"""
        )
        return dict(cursor.fetchall())


def _proven(tenant, query: str, acl: list[str], limit: int) -> bool:
    """Whether the MaxScore statement proved its top without reading every posting."""
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        keys = readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl)
        statement = text_arm_statement(
            cursor, tenant=tenant, query=query, keys=keys, limit=limit, cutoff=None
        )
        assert statement is not None
        cursor.execute(*statement)
        return all(row[2] for row in cursor.fetchall())


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


def test_each_words_count_follows_its_chunks(tenant, other_tenant):
    """retrieval_terms counts, per word and ACL, the tenant's current chunks that hold it: through
    indexing, an ACL change (the counts move to the new ACL), a new version (the old one's words
    leave) and deletion; a word no chunk holds any more has no row; another tenant's are its own."""
    _index(tenant, "policy", "refunds are paid quickly\n\nparcels are insured quickly", ["group:support"])
    _index(other_tenant, "policy", "refunds everywhere", ["group:support"])
    assert _term_counts(tenant) == _counted_from_chunks(tenant)
    assert _term_counts(tenant)["quickly"] == 2 and _term_counts(tenant)["parcels"] == 1
    document_acl_set(tenant=tenant, document_id="policy", acl=["group:all"], actor="user:test")
    assert _term_counts(tenant) == _counted_from_chunks(tenant)
    with tenant_scope(tenant.tenant_id):
        [key] = ChunkAcl.objects.filter(acl=["group:all"]).values_list("acl_key", flat=True)
        assert set(ChunkTerm.objects.values_list("acl_key", flat=True)) == {key}
    _index(tenant, "policy", "refunds are paid within thirty days", ["group:support"], version="2")
    counts = _term_counts(tenant)
    assert counts == _counted_from_chunks(tenant) and "parcels" not in counts and counts["thirty"] == 1
    document_delete(tenant=tenant, document_id="policy", actor="user:test")
    assert _term_counts(tenant) == {}
    assert _term_counts(other_tenant) == _counted_from_chunks(other_tenant) != {}


def test_the_acl_filters_before_the_top_k(tenant):
    """Three hundred chunks others may read say the words more often than any of the thirteen the rare
    principal may read; it still gets exactly its ten best."""
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
        found = text_candidates(tenant=tenant, query="refund parcel card", limit=10, acl=["group:g0"])
        exact = text_candidates(
            tenant=tenant, query="refund parcel card", limit=10, acl=["group:g0"], exact=True
        )
        assert set(found) <= _chunks("mine") and len(found) == 10
        [best] = Chunk.objects.filter(document_id_text="mine", text__contains="parcel").values_list(
            "id", flat=True
        )
    assert found == exact == _idf_order(tenant, "refund parcel card", ["group:g0"], 10)
    assert found[0] == best


def test_the_text_arm_ranks_as_idf_weighted_ts_rank_over_every_readable_match(tenant):
    """Common words (in most chunks) and rare ones (in a few): a query with both is answered from the
    rare words' postings and proved, one the rare words cannot prove reads every posting, and either
    way the ranking is the long way's."""
    rng = random.Random(11)
    words = ["refund", "parcel", "late", "city", "oslo", "card", "plan", "phone", "email", "invoice"]
    rare = ["zebra", "quokka", "narwhal"]
    groups = ["group:a", "group:b", "group:c"]
    for d in range(8):
        paragraphs = [
            " ".join(
                rng.choices(words, k=rng.randint(2, 10)) + ([rng.choice(rare)] if rng.random() < 0.06 else [])
            )
            for _ in range(30)
        ]
        _index(tenant, f"d{d}", "\n\n".join(paragraphs), sorted(set(rng.sample(groups, rng.randint(1, 2)))))
    counts = _term_counts(tenant)
    assert all(counts[w] > 24 for w in words) and all(counts[w] < 24 for w in rare if w in counts)
    for i in range(8):
        query = " ".join(rng.sample(words, 2) + [rare[i % 3]])
        acl = rng.sample(groups, 1)
        with tenant_scope(tenant.tenant_id):
            exact = text_candidates(tenant=tenant, query=query, limit=30, acl=acl, exact=True)
            assert exact == _idf_order(tenant, query, acl, 30)
            assert text_candidates(tenant=tenant, query=query, limit=30, acl=acl) == exact
            assert text_candidates(tenant=tenant, query=query, limit=5, acl=acl) == exact[:5]
    # A few chunks hold a rare word, far more than 5 hold a common one: the 5 best are proved from
    # the rare word's postings; 30 cannot be (fewer chunks hold it), so every posting is read.
    assert _proven(tenant, "zebra refund", ["group:a", "group:b", "group:c"], 5)
    assert not _proven(tenant, "zebra refund", ["group:a", "group:b", "group:c"], 30)
    with tenant_scope(tenant.tenant_id):
        everyone = ["group:a", "group:b", "group:c"]
        for limit in (5, 30):
            assert text_candidates(
                tenant=tenant, query="zebra refund", limit=limit, acl=everyone
            ) == _idf_order(tenant, "zebra refund", everyone, limit)
        # A chunk with the rare word ranks above every chunk with only the common one.
        first = text_candidates(tenant=tenant, query="zebra refund", limit=1, acl=everyone)
        assert Chunk.objects.get(id=first[0]).text.count("zebra") >= 1


def test_documents_a_principal_cannot_read_do_not_move_its_ranking(tenant):
    """The outside tester's probe: Alice's two documents, one with "kelvoran" and one with "mirtazek";
    documents only another group reads, full of "kelvoran", used to make that word common and flip
    her ranking, telling her the word is in documents she cannot read. Weights count only what the
    principal may read."""
    filler = "\n\n".join(f"memo about the weekly plan number {n}" for n in range(20))
    _index(tenant, "filler", filler, ["group:ga", "group:gb"])
    _index(tenant, "side-s1", "memo kelvoran kelvoran", ["group:ga"])
    _index(tenant, "side-s2", "memo mirtazek", ["group:ga"])
    with tenant_scope(tenant.tenant_id):
        before = text_candidates(tenant=tenant, query="kelvoran mirtazek", limit=5, acl=["group:ga"])
        assert before == sorted(_chunks("side-s1")) + sorted(_chunks("side-s2"))  # two of "kelvoran" first
    for d in range(3):
        _index(tenant, f"hidden{d}", "\n\n".join("kelvoran report" for _ in range(10)), ["group:gb"])
    with tenant_scope(tenant.tenant_id):
        after = text_candidates(tenant=tenant, query="kelvoran mirtazek", limit=5, acl=["group:ga"])
        assert after == before and len(after) == 2
        assert after == _idf_order(tenant, "kelvoran mirtazek", ["group:ga"], 5)


def test_chinese_words_are_found_inside_chunks_written_without_spaces(tenant):
    """A sentence without spaces was one "word" to PostgreSQL's parser: 退款 never found 全额退款."""
    for name, text in (("refunds", "退款政策：订单损坏时全额退款。"), ("shipping", "发货需要三天。")):
        document_index(
            tenant=tenant,
            document_id=name,
            source_uri=f"mem://{name}",
            source_version="1",
            data=text.encode(),
            media_type="text/plain",
            acl=["group:all"],
            actor="user:test",
            wait=True,
        )
    with tenant_scope(tenant.tenant_id):
        [refund] = _chunks("refunds")
        assert text_candidates(tenant=tenant, query="退款", limit=5, acl=["group:all"]) == [refund]
        assert text_candidates(tenant=tenant, query="损坏的订单", limit=5, acl=["group:all"]) == [refund]
        assert ChunkTerm.objects.filter(term="退款").values_list("chunks", flat=True).get() == 1
        assert text_candidates(tenant=tenant, query="北京", limit=5, acl=["group:all"]) == []
