"""The compliance console offboards a tenant: export download, typed confirmation, receipt, audit."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

from console.models import AuditEntry
from core.models import OffboardingStatus, Tenant, TenantOffboarding
from core.tenancy import tenant_ensure, tenant_scope
from runs.kernel.models import AgentRun
from tests.console.conftest import make_user
from tests.core.test_offboarding import counts, owner_url, populate

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


def test_the_offboarded_tenants_staff_are_told_at_sign_in_and_the_receipt_is_in_the_menu(client, setup):
    acme, globex = setup
    clerk = make_user("clerk", "support", tenants=(globex,))
    both = make_user("both", "support", tenants=(acme, globex))
    officer = make_user("globex-officer", "compliance", tenants=(globex,))
    client.force_login(officer)
    done = client.post("/compliance/globex/offboarding/erase/", {"slug_confirm": "globex", "note": "ended"})
    assert done.status_code == 302
    listing = client.get("/compliance/offboardings/").content.decode()
    assert 'id="offboardings"' in listing and "globex" in listing and done["Location"] in listing
    assert 'href="/compliance/offboardings/"' in listing  # the menu leads there
    entry = AuditEntry.objects.get(action="tenant_erased")
    assert sorted(entry.details["members"]) == sorted([clerk.pk, both.pk, officer.pk])
    client.logout()
    told = client.post("/sign-in/", {"username": "clerk", "password": "pw-for-console-tests-1"}, follow=True)
    page = told.content.decode()
    assert "Your tenant Globex (globex) was offboarded on" in page and 'class="offboarded warning"' in page
    client.logout()
    # A member of another tenant still works there and is not told at every sign-in.
    other = client.post("/sign-in/", {"username": "both", "password": "pw-for-console-tests-1"}, follow=True)
    assert "was offboarded" not in other.content.decode()


def test_an_erasure_that_cannot_finish_is_a_409_with_retry_and_its_rows_kept(client, setup, monkeypatch):
    """A lock the erasure cannot have in time (a long transaction of another session on one of the
    tenant's tables): PostgreSQL's lock timeout, every try rolled back, the form says so, and erasing
    again once the lock is gone resumes the same offboarding."""
    acme, _ = setup
    before = counts(acme)
    monkeypatch.setattr("core.offboarding.ERASE_LOCK_TIMEOUT", "200ms")
    with psycopg.connect(owner_url()) as holder:  # another session, in a transaction until the block ends
        holder.execute("LOCK TABLE memory_items IN SHARE MODE")
        stopped = client.post(
            "/compliance/acme/offboarding/erase/", {"slug_confirm": "acme", "note": "contract ended"}
        )
    assert stopped.status_code == 409, stopped.content[:500]
    assert b"erasing again resumes it" in stopped.content and b"did not finish (failed)" in stopped.content
    failed = TenantOffboarding.objects.get(tenant_id=acme.tenant_id)
    assert failed.status == OffboardingStatus.FAILED and "lock timeout" in failed.error
    # Every row is still there; the keys were revoked (kept) and the stored blobs, which go first
    # through their records, are gone.
    kept = {"table.api_keys", "table.stored_artifacts"}
    after = counts(acme)
    assert {k: v for k, v in after.items() if k.startswith("table.") and k not in kept} == {
        k: v for k, v in before.items() if k.startswith("table.") and k not in kept
    }
    stopped_entries = AuditEntry.objects.filter(action="tenant_erase_interrupted").values_list(
        "details", flat=True
    )
    assert ["stopped" in d["reason"] for d in stopped_entries] == [True]
    assert not AuditEntry.objects.filter(action="tenant_erase_refused").exists()

    again = client.post(
        "/compliance/acme/offboarding/erase/", {"slug_confirm": "acme", "note": "contract ended"}
    )
    assert again.status_code == 302
    done = TenantOffboarding.objects.get(tenant_id=acme.tenant_id)
    assert done.pk == failed.pk and done.status == OffboardingStatus.COMPLETED and done.receipt["clean"]
