"""The full-text postings: written with the claim, confined by row-level security, filtered before the
top-k, ranked as ts_rank ranks every match, and gone when the subject is erased."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from memory.models import MemoryItem, MemoryPosting
from memory.projection import text_candidates
from memory.services import memory_invalidate, memory_remember
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


def _remember(tenant, subject: str, key: str, value: str, **kwargs):
    return memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="notes",
        key=key,
        value=value,
        provenance=said(),
        **kwargs,
    )


def _postings(tenant, memory_id) -> dict[str, float]:
    with tenant_scope(tenant.tenant_id):
        return dict(MemoryPosting.objects.filter(memory_id=memory_id).values_list("term", "impact"))


def _ts_rank_order(tenant, query: str, limit: int) -> list:
    """The ranking the text arm had before postings: ts_rank over every matching claim. ts_rank's last
    float4 digit depends on the order it adds the words in (0.065858774 and 0.06585877 for the same
    counts), so scores are compared to 5 decimals: closer ones are the same score."""
    words = " | ".join(dict.fromkeys(query.lower().split()))
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """SELECT memory_id FROM memory_items WHERE invalidated_at IS NULL
                  AND search @@ to_tsquery('simple', %s)
                ORDER BY round(ts_rank(search, to_tsquery('simple', %s))::numeric, 5) DESC, memory_id LIMIT %s""",
            [words, words, limit],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_claims_postings_are_written_with_it_and_follow_it(tenant):
    item = _remember(tenant, "cust-1", "city", "Oslo oslo harbour O'Brien back\\slash")
    postings = _postings(tenant, item.memory_id)
    assert {"notes", "city", "oslo", "harbour"} <= set(postings)
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT ts_rank(search, 'oslo'::tsquery), ts_rank(search, 'harbour'::tsquery) FROM memory_items"
            " WHERE memory_id = %s",
            [item.memory_id],
        )
        oslo, harbour = cursor.fetchone()
    assert postings["oslo"] == pytest.approx(oslo) and postings["harbour"] == pytest.approx(harbour)
    assert postings["oslo"] > postings["harbour"]  # two occurrences weigh more than one
    newer = _remember(tenant, "cust-1", "city", "Bergen fjord")
    assert _postings(tenant, item.memory_id) == {}  # superseded: no longer searchable by its words
    assert "bergen" in _postings(tenant, newer.memory_id)
    memory_invalidate(tenant=tenant, memory_id=newer.memory_id, reason="moved")
    assert _postings(tenant, newer.memory_id) == {}
    third = _remember(tenant, "cust-1", "plan", "premium plan")
    with tenant_scope(tenant.tenant_id):
        MemoryItem.objects.filter(memory_id=third.memory_id).update(value="basic plan")
    assert set(_postings(tenant, third.memory_id)) == {"notes", "plan", "basic"}
    with tenant_scope(tenant.tenant_id):
        MemoryItem.objects.filter(memory_id=third.memory_id).delete()
    assert _postings(tenant, third.memory_id) == {}


def test_postings_honour_row_level_security_across_tenants(tenant, other_tenant):
    mine = _remember(tenant, "cust-1", "city", "Oslo harbour")
    theirs = _remember(other_tenant, "cust-1", "city", "Oslo harbour")
    with tenant_scope(tenant.tenant_id):
        assert set(MemoryPosting.objects.values_list("memory_id", flat=True)) == {mine.memory_id}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM memory_postings WHERE tenant_id = %s", [other_tenant.tenant_id]
            )
            assert cursor.fetchone()[0] == 0
        assert text_candidates(tenant=tenant, query="oslo", limit=10, valid_at=timezone.now()) == [
            mine.memory_id
        ]
        # Nor can a posting be written into another tenant's rows.
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO memory_postings (tenant_id, memory_id, term, impact, subject_id)"
                " VALUES (%s, %s, 'x', 1, 'cust-1')",
                [other_tenant.tenant_id, theirs.memory_id],
            )
    with tenant_scope(other_tenant.tenant_id):
        assert set(MemoryPosting.objects.values_list("memory_id", flat=True)) == {theirs.memory_id}


def test_the_subject_and_expiry_filter_before_the_top_k(tenant):
    """Twenty other subjects' claims say the word more often than the subject's one claim does; with a
    per-word cutoff of 5 postings the subject's claim is still found, and an expired claim never."""
    for i in range(20):
        _remember(tenant, f"other-{i}", "note", "refund refund refund")
    expired = _remember(
        tenant,
        "cust-1",
        "old",
        "refund refund refund refund",
        expires_at=timezone.now() + timedelta(seconds=1),
    )
    mine = _remember(tenant, "cust-1", "note", "refund")
    later = timezone.now() + timedelta(seconds=5)
    with tenant_scope(tenant.tenant_id):
        found = text_candidates(
            tenant=tenant, query="refund", limit=1, valid_at=later, subject_id="cust-1", depth=5
        )
        every = text_candidates(tenant=tenant, query="refund", limit=50, valid_at=later, depth=5)
    assert found == [mine.memory_id]
    assert expired.memory_id not in every and len(every) == 21


def test_the_text_arm_ranks_as_ts_rank_over_every_match(tenant):
    rng = random.Random(7)
    words = ["refund", "parcel", "late", "city", "oslo", "card", "plan", "phone", "email", "o'neil"]
    for i in range(300):
        _remember(tenant, f"cust-{i % 7}", f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 8))))
    now = timezone.now()
    for _ in range(10):
        query = " ".join(rng.sample(words[:-1], 3))
        exact = _ts_rank_order(tenant, query, 50)
        with tenant_scope(tenant.tenant_id):
            assert text_candidates(tenant=tenant, query=query, limit=50, valid_at=now, depth=None) == exact
            assert text_candidates(tenant=tenant, query=query, limit=50, valid_at=now) == exact
            # Starting at 40 postings a word, the rounds read deeper until the top 10 is proven.
            cut = text_candidates(tenant=tenant, query=query, limit=10, valid_at=now, depth=40)
        assert cut == exact[:10]


def test_an_erased_subject_leaves_no_postings(tenant):
    gone = _remember(tenant, "cust-erase", "city", "lives at Baker Street 221b London")
    kept = _remember(tenant, "cust-stay", "city", "lives in Oslo")
    assert _postings(tenant, gone.memory_id)
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt["clean"] is True
    assert done.receipt["final_scan"]["memory_postings.term"] == 0
    assert done.receipt["final_scan"]["memory_postings.subject_id"] == 0
    with tenant_scope(tenant.tenant_id):
        assert not MemoryPosting.objects.filter(subject_id="cust-erase").exists()
        assert not MemoryPosting.objects.filter(term="baker").exists()
    assert _postings(tenant, kept.memory_id)


def test_claims_carry_no_text_index_row_level_security_cannot_use() -> None:
    """The GIN index on the search vector cost every write and served no search (the arms read the
    postings); it is gone, and no other GIN index took its place on memory_items."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'memory_items'::regclass AND a.amname = 'gin'"
        )
        assert cursor.fetchall() == []


def test_chinese_and_japanese_words_are_found_inside_text_written_without_spaces(tenant):
    """A sentence without spaces was one "word" to PostgreSQL's parser: 退款 never found 要求退款."""
    refund = _remember(tenant, "cust-1", "request", "客户要求退款，订单已损坏")
    _remember(tenant, "cust-1", "city", "住在上海")
    parcel = _remember(tenant, "cust-2", "note", "荷物が届きました Oslo")
    assert {"要求", "求退", "退款", "订单", "损坏"} <= set(_postings(tenant, refund.memory_id))
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        for query, found in (("退款", refund), ("订单损坏了吗", refund), ("届き", parcel), ("oslo", parcel)):
            assert text_candidates(tenant=tenant, query=query, limit=10, valid_at=now) == [found.memory_id]
        assert text_candidates(tenant=tenant, query="北京", limit=10, valid_at=now) == []


def test_query_words_split_as_the_search_vectors_do():
    from importlib import import_module

    from memory.postings import CJK, query_words

    assert query_words("要求退款 Refund order-7 的") == ["refund", "order", "7", "要求", "求退", "退款", "的"]
    assert query_words("Клиент просит вернуть") == ["клиент", "просит", "вернуть"]
    # The migration's class (as PostgreSQL writes it) is the one queries are split with.
    migration = import_module("memory.migrations.0011_cjk_words")
    assert migration.CJK.encode().decode("unicode_escape") == CJK
    with connection.cursor() as cursor:
        cursor.execute("SELECT keeper_search_text(%s)", ["要求退款 々 𠀀𠀁 Refund"])
        text = cursor.fetchone()[0]
    assert text.split() == ["Refund", "要求", "求退", "退款", "々", "𠀀𠀁"]
