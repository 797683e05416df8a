"""The vector projection and hybrid search: relevant first, tenant-confined, never mixed embedders."""

from __future__ import annotations

import pytest

from core.tenancy import tenant_scope
from memory.embedders import HashingEmbedder
from memory.models import MemoryVector
from memory.projection import memory_project, memory_search
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
