"""The console's MEMORY.md page: compliance reads and edits it (note required, audited by digest),
bad lines come back with their numbers, and a person confirms an inferred claim for the subject."""

from __future__ import annotations

import json

import pytest

from console.models import AuditEntry
from core.digests import subject_digest
from memory.consent import ClaimPending
from memory.filememory import memory_md_render
from memory.poisoning.models import HeldClaim, HeldStatus
from memory.selectors import memory_recall
from memory.services import memory_remember
from tests.console.conftest import as_role, role_users  # noqa: F401 - the fixtures
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db

PAGE = "/compliance/acme/memory-md/"


def test_compliance_edits_memory_md_with_a_note_and_the_edit_is_audited(as_role, tenant):  # noqa: F811
    memory_remember(
        tenant=tenant, subject_id="c-1", namespace="preference", key="language", value="de", provenance=said()
    )
    assert as_role("support").get(PAGE + "?subject=c-1").status_code == 403
    client = as_role("compliance")
    overview = client.get("/compliance/?tenant=acme&subject=c-1").content.decode()
    assert f"{PAGE}?subject=c-1" in overview  # the subject's overview links to it
    page = client.get(PAGE + "?subject=c-1")
    assert page.status_code == 200 and "preference/language: &quot;de&quot;" in page.content.decode()
    edited = memory_md_render(tenant=tenant, subject_id="c-1").replace('"de"', '"fr"')
    no_note = client.post(PAGE, {"subject": "c-1", "content": edited, "note": " "})
    assert no_note.status_code == 422 and "This field is required." in no_note.content.decode()
    bad = client.post(PAGE, {"subject": "c-1", "content": edited + "nonsense\n", "note": "ticket 7"})
    assert bad.status_code == 422 and f"Line {len(edited.splitlines()) + 1}:" in bad.content.decode()
    assert [m.value for m in memory_recall(tenant=tenant, subject_id="c-1")] == ["de"]
    assert not AuditEntry.objects.filter(action="memory_md_edit").exists()
    saved = client.post(PAGE, {"subject": "c-1", "content": edited, "note": "ticket 7"})
    assert saved.status_code == 302
    [item] = memory_recall(tenant=tenant, subject_id="c-1")
    assert item.value == "fr" and item.provenance["source_type"] == "operator"
    assert item.provenance["source_id"] == "memory.md:user:compliance"
    [entry] = AuditEntry.objects.filter(action="memory_md_edit")
    assert entry.note == "ticket 7" and entry.details["superseded"] == 1
    assert entry.target_id == subject_digest(tenant_id=tenant.tenant_id, subject_id="c-1")
    assert "c-1" not in json.dumps(entry.details)


def test_a_person_confirms_an_inferred_claim_in_the_console(as_role, tenant, settings):  # noqa: F811
    settings.KEEPER_CONSENT_POLICY = json.dumps({"*": {"profile": ["explicit"]}})
    with pytest.raises(ClaimPending) as waiting:
        memory_remember(
            tenant=tenant,
            subject_id="c-1",
            namespace="profile",
            key="city",
            value="Porto",
            provenance=said(source_type="model_inference", validation_method="unvalidated"),
            consent_basis="inferred",
        )
    pending_id = waiting.value.details["pending_id"]
    client = as_role("compliance")
    assert "profile/city" in client.get(PAGE + "?subject=c-1").content.decode()
    url = f"/compliance/acme/pending/{pending_id}/confirm/"
    client.post(url, {"subject": "c-1", "note": ""})
    assert memory_recall(tenant=tenant, subject_id="c-1") == []
    assert client.post(url, {"subject": "c-1", "note": "confirmed by phone, ticket 9"}).status_code == 302
    [item] = memory_recall(tenant=tenant, subject_id="c-1")
    assert item.value == "Porto" and item.consent_basis == "explicit"
    assert HeldClaim.objects.get(held_id=pending_id).status == HeldStatus.APPROVED
    [entry] = AuditEntry.objects.filter(action="memory_confirm")
    assert entry.target_id == str(item.memory_id) and entry.note == "confirmed by phone, ticket 9"
