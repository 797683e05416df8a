"""The compliance console offboards a tenant: export download, typed confirmation, receipt, audit."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from console.models import AuditEntry
from core.models import OffboardingStatus, Tenant, TenantOffboarding
from core.tenancy import tenant_ensure, tenant_scope
from runs.kernel.models import AgentRun
from tests.console.conftest import make_user
from tests.core.test_offboarding import counts, populate

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


@pytest.fixture
def setup(client):
    acme = tenant_ensure(slug="acme", name="Acme")
    globex = tenant_ensure(slug="globex", name="Globex")
    populate(acme, "cust-a")
    populate(globex, "cust-g")
    officer = make_user("officer", "compliance", tenants=(acme,))
    client.force_login(officer)
    return acme, globex


def test_the_console_exports_then_erases_with_a_typed_confirmation(client, setup):
    acme, globex = setup
    globex_before = counts(globex)
    page = client.get("/compliance/acme/offboarding/")
    assert page.status_code == 200 and b"memory_vectors_hnsw_" in page.content
    export = client.post("/compliance/acme/offboarding/export/")
    assert export.status_code == 200
    body = b"".join(export.streaming_content)
    lines = [json.loads(x) for x in gzip.decompress(body).splitlines()]
    assert lines[0]["tenant"]["slug"] == "acme" and lines[-1]["counts"]["agent_events"] > 3
    digest = hashlib.sha256(body).hexdigest()
    assert AuditEntry.objects.filter(action="tenant_export", details__sha256=digest).exists()

    wrong = client.post(
        "/compliance/acme/offboarding/erase/", {"slug_confirm": "acm", "note": "contract ended"}
    )
    assert wrong.status_code == 400 and b"does not match" in wrong.content
    assert Tenant.objects.filter(slug="acme").exists()

    done = client.post(
        "/compliance/acme/offboarding/erase/", {"slug_confirm": "acme", "note": "contract ended"}
    )
    assert done.status_code == 302
    offboarding = TenantOffboarding.objects.get(tenant_id=acme.tenant_id, status=OffboardingStatus.COMPLETED)
    assert done["Location"] == f"/compliance/offboardings/{offboarding.offboarding_id}/"
    assert offboarding.export_digest == digest and offboarding.receipt["clean"]
    receipt = client.get(done["Location"])
    assert receipt.status_code == 200
    assert b"found nothing" in receipt.content and b"retrieval_chunks_hnsw_" in receipt.content
    assert json.loads(client.get(done["Location"] + "receipt.json").content)["clean"] is True
    # The tenant's own audit entries went with it; the erasure's own entries stay (no tenant).
    assert not AuditEntry.objects.filter(tenant_id=acme.tenant_id).exists()
    kept = AuditEntry.objects.filter(target_id=str(offboarding.offboarding_id), action="tenant_erased").get()
    assert kept.actor == "user:officer" and kept.details["clean"] is True
    assert AuditEntry.objects.filter(action="tenant_erase_requested", note="contract ended").exists()
    assert counts(globex) == globex_before


def test_the_console_refuses_while_a_run_is_leased_and_other_users_cannot_see_a_receipt(client, setup):
    acme, globex = setup
    with tenant_scope(acme.tenant_id):
        AgentRun.objects.filter(tenant_id=acme.tenant_id).update(
            lease_owner="worker-1", lease_expires_at=timezone.now() + timedelta(minutes=5)
        )
    refused = client.post("/compliance/acme/offboarding/erase/", {"slug_confirm": "acme", "note": "bye"})
    assert refused.status_code == 409 and b"live lease" in refused.content
    assert AuditEntry.objects.filter(action="tenant_erase_refused").exists()
    assert (
        client.post(
            "/compliance/globex/offboarding/erase/", {"slug_confirm": "globex", "note": "x"}
        ).status_code
        == 404
    )
    with tenant_scope(acme.tenant_id):
        AgentRun.objects.filter(tenant_id=acme.tenant_id).update(lease_owner=None, lease_expires_at=None)
    done = client.post("/compliance/acme/offboarding/erase/", {"slug_confirm": "acme", "note": "bye"})
    assert done.status_code == 302
    client.force_login(make_user("other-officer", "compliance", tenants=(globex,)))
    assert client.get(done["Location"]).status_code == 404


def test_the_audit_log_still_refuses_a_delete_outside_an_offboarding(setup):
    acme, _ = setup
    from django.db import DatabaseError, transaction

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(tenant_id=acme.tenant_id).delete()
