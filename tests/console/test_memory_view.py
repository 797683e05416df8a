"""The engineer's memory view: a subject's claims (or the tenant's newest) with state and supersede
chain, each source leading to the run's event it names; a source that names no run shows no link."""

from __future__ import annotations

import pytest

from memory.services import memory_remember, memory_supersede
from tests.console.test_engineer import start
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


def test_the_memory_view_shows_claims_and_leads_to_the_event_they_came_from(as_role, tenant):
    run = start(tenant)
    first = memory_remember(
        tenant=tenant,
        subject_id="s-1",
        namespace="preference",
        key="tone",
        value="formal",
        provenance=said(run_id=str(run.run_id), seq=1),
    )
    memory_supersede(
        tenant=tenant,
        memory_id=first.memory_id,
        value="casual",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    memory_remember(
        tenant=tenant,
        subject_id="s-2",
        namespace="profile",
        key="city",
        value="Oslo",
        provenance=said(run_id="not-a-run-id"),
    )
    client = as_role("engineer")
    page = client.get("/memory/", {"tenant": "acme", "subject": "s-1"}).content.decode()
    items = page[page.index('id="memory-items"') :]
    assert "preference / tone" in items and "&quot;casual&quot;" in items and "superseded" in items
    assert f'href="/runs/{run.run_id}/?focus=2#seq-focus"' in items and "Oslo" not in items
    newest = client.get("/memory/", {"tenant": "acme"}).content.decode()
    assert (
        "Oslo" in newest
        and "s-2 ·" in newest
        and "not-a-run-id" not in newest.split('id="memory-items"')[1].split("provenance")[0]
    )
    focused = client.get(f"/runs/{run.run_id}/", {"focus": 2}).content.decode()
    assert 'id="seq-focus" class="focused"' in focused
    assert as_role("support").get("/memory/").status_code == 403
