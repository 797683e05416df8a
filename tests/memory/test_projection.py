"""The vector projection and hybrid search: relevant first, tenant-confined, never mixed embedders."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from core.tenancy import tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryItem, MemoryVector
from memory.projection import RRF_K, memory_project, memory_search, text_candidates, vector_candidates
from memory.services import memory_invalidate, memory_remember
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db

FACTS = {
    "language": "answer in Russian please",
    "city": "lives in Oslo near the harbour",
    "contact": "never call by phone, email only",
    "plan": "premium support plan since 2024",
}


def _seed(tenant, subject="cust-1"):
    return {
        key: memory_remember(
            tenant=tenant, subject_id=subject, namespace="profile", key=key, value=text, provenance=said()
        )
        for key, text in FACTS.items()
    }


def test_projection_embeds_each_current_item_once(tenant):
    _seed(tenant)
    assert memory_project(tenant=tenant) == {"embedded": 4, "removed_other_embedders": 0}
    assert memory_project(tenant=tenant) == {"embedded": 0, "removed_other_embedders": 0}


def test_hybrid_search_finds_the_relevant_claim_first(tenant):
    items = _seed(tenant)
    memory_project(tenant=tenant)
    [first, *_] = memory_search(tenant=tenant, query="how should we contact the customer by phone", k=3)
    assert first.item.memory_id == items["contact"].memory_id
    assert first.vector_rank is not None and first.text_rank is not None


def test_search_never_returns_another_tenants_or_an_invalidated_claim(tenant, other_tenant):
    mine = _seed(tenant)
    _seed(other_tenant)
    memory_project(tenant=tenant)
    memory_project(tenant=other_tenant)
    memory_invalidate(tenant=tenant, memory_id=mine["city"].memory_id, reason="moved")
    hits = memory_search(tenant=tenant, query="Oslo harbour phone Russian premium", k=10)
    assert {h.item.tenant_id for h in hits} == {tenant.tenant_id}
    assert mine["city"].memory_id not in {h.item.memory_id for h in hits}


def test_changing_the_embedder_reprojects_and_never_mixes_dimensions(tenant):
    _seed(tenant)
    memory_project(tenant=tenant)
    small = HashingEmbedder(dimensions=64)
    assert memory_project(tenant=tenant, embedder=small) == {"embedded": 4, "removed_other_embedders": 4}
    with tenant_scope(tenant.tenant_id):
        assert set(MemoryVector.objects.values_list("embedder_key", "dimensions")) == {(small.key, 64)}
    assert memory_search(tenant=tenant, query="email only", embedder=small, k=1)[0].item.key == "contact"


def _crowd(tenant, n: int, text: str, **fields):
    """n claims whose text is the query itself: nearer than anything and holding every word."""
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        MemoryItem.objects.bulk_create(
            [
                MemoryItem(
                    tenant=tenant,
                    subject_id=fields.get("subject_id", "cust-1"),
                    namespace="profile",
                    key=f"crowd_{i}",
                    value=text,
                    provenance=said(),
                    valid_from=now - timedelta(days=2),
                    expires_at=fields.get("expires_at"),
                    invalidated_at=fields.get("invalidated_at"),
                    invalidation_reason="test" if fields.get("invalidated_at") else None,
                )
                for i in range(n)
            ]
        )


@pytest.mark.parametrize(
    "crowd",
    [
        {"subject_id": "cust-2"},
        {"expires_at": timezone.now() - timedelta(days=1)},
        {"invalidated_at": timezone.now() - timedelta(days=1)},
    ],
    ids=["other-subject", "expired", "invalidated"],
)
def test_claims_the_search_may_not_return_never_take_the_places_of_those_it_may(tenant, crowd):
    """300 claims nearer to the query and holding more of its words than the one current claim of
    the subject, but of another subject, expired or invalidated: the subject's claim is still found
    (the arms filter in SQL, so such claims never fill the candidate lists)."""
    items = _seed(tenant)
    query = "lives in Oslo near the harbour answer in Russian please"
    _crowd(tenant, 300, query, **crowd)
    memory_project(tenant=tenant, embedder=HashingEmbedder())
    hits = memory_search(tenant=tenant, query=query, subject_id="cust-1", k=3, embedder=HashingEmbedder())
    found = {h.item.memory_id for h in hits}
    assert items["city"].memory_id in found and items["language"].memory_id in found, hits
    assert all(h.item.subject_id == "cust-1" and h.item.key in FACTS for h in hits)


def test_the_one_statement_search_ranks_as_its_two_arms_do(tenant):
    """memory_search sends both arms in one statement: its ranks and scores are those of the arms
    run alone (vector_candidates, text_candidates), fused by RRF, for many claims and queries."""
    rng = random.Random(11)
    words = ["refund", "parcel", "late", "city", "oslo", "card", "plan", "phone", "email", "harbour"]
    for i in range(120):
        memory_remember(
            tenant=tenant,
            subject_id=f"cust-{i % 5}",
            namespace="notes",
            key=f"k{i}",
            value=" ".join(rng.choices(words, k=rng.randint(2, 8))),
            provenance=said(),
        )
    embedder = HashingEmbedder()
    memory_project(tenant=tenant, embedder=embedder)
    for _ in range(8):
        query = " ".join(rng.sample(words, 3))
        [vector] = embedder.embed([query])
        now = timezone.now()
        with tenant_scope(tenant.tenant_id):
            by_vector = vector_candidates(
                tenant=tenant, embedder=embedder, vector=vector, limit=20, valid_at=now
            )
            by_text = text_candidates(tenant=tenant, query=query, limit=20, valid_at=now)
        scores: dict = {}
        for ranking in (by_vector, by_text):
            for rank, memory_id in enumerate(ranking, start=1):
                scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (RRF_K + rank)
        expected = sorted(scores, key=lambda m: (-scores[m], str(m)))[:10]
        hits = memory_search(tenant=tenant, query=query, k=10, embedder=embedder, candidates=20)
        assert [h.item.memory_id for h in hits] == expected
        assert all(h.score == round(scores[h.item.memory_id], 6) for h in hits)
        assert all(
            h.text_rank == (by_text.index(h.item.memory_id) + 1 if h.item.memory_id in by_text else None)
            for h in hits
        )


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_vector_arm_runs_on_a_connection_of_its_own(
    tenant, other_tenant, monkeypatch
):
    """memory_search outside a transaction walks the vector arm on a pool thread's own connection
    while the text arm runs on the caller's: the same hits as both arms in one statement (the
    setting off), and still only this tenant's current claims."""
    import threading

    from django.test import override_settings

    from memory import projection

    rng = random.Random(5)
    words = ["refund", "parcel", "late", "city", "oslo", "card", "plan", "phone", "email", "harbour"]
    for owner in (tenant, other_tenant):
        for i in range(40):
            memory_remember(
                tenant=owner,
                subject_id=f"cust-{i % 3}",
                namespace="notes",
                key=f"k{i}",
                value=" ".join(rng.choices(words, k=rng.randint(2, 6))),
                provenance=said(),
            )
        memory_project(tenant=owner)
    walks: list[tuple[int, str]] = []
    callers: list[int] = []
    first_column, text_ranked = projection._first_column, projection.text_ranked

    def walked(cursor, statements):
        walks.append((cursor.connection.info.backend_pid, threading.current_thread().name))
        return first_column(cursor, statements)

    def ranked_here(cursor, **kwargs):
        callers.append(cursor.connection.info.backend_pid)
        return text_ranked(cursor, **kwargs)

    monkeypatch.setattr(projection, "_first_column", walked)
    monkeypatch.setattr(projection, "text_ranked", ranked_here)
    for query in ("refund parcel late", "oslo harbour phone", "card plan email"):
        beside = memory_search(tenant=tenant, query=query, k=8)
        with override_settings(KEEPER_SEARCH_PARALLEL_ARMS=False):
            together = memory_search(tenant=tenant, query=query, k=8)
        assert [(h.item.memory_id, h.score, h.vector_rank, h.text_rank) for h in beside] == [
            (h.item.memory_id, h.score, h.vector_rank, h.text_rank) for h in together
        ]
        assert len(beside) == 8 and {h.item.tenant_id for h in beside} == {tenant.tenant_id}
    assert len(walks) == 3 and len(callers) == 3  # the setting off sent both arms in one statement
    assert all(thread.startswith("keeper-search-arm") for _, thread in walks)
    assert not {pid for pid, _ in walks} & set(callers)
