"""Consent: each claim's basis, the per-tenant policy, inferred claims waiting for confirmation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from memory.consent import ClaimPending, ConsentRequired, consent_policy_parse
from memory.poisoning.models import HeldClaim, HeldStatus
from memory.selectors import memory_recall
from memory.services import memory_learn_from_events, memory_purge_expired, memory_remember
from tests.memory.test_api import api  # noqa: F401 - the fixture
from tests.memory.test_extraction import said as said_event
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db

POLICY = json.dumps({"*": {"profile": ["explicit", "contract"]}, "other": {"profile": ["inferred"]}})
GUESS = said(source_type="model_inference", validation_method="unvalidated")


def infer(tenant, key="city", value="Porto", basis="inferred"):
    return memory_remember(
        tenant=tenant,
        subject_id="c-1",
        namespace="profile",
        key=key,
        value=value,
        provenance=GUESS,
        consent_basis=basis,
    )


def test_every_write_records_the_basis_it_was_given_and_unknown_bases_are_refused(api, tenant):  # noqa: F811
    # A user's statement is not their consent to keep it: no basis given, none recorded.
    assert (
        memory_remember(
            tenant=tenant,
            subject_id="c-1",
            namespace="preference",
            key="language",
            value="de",
            provenance=said(),
        ).consent_basis
        is None
    )
    guess = memory_remember(
        tenant=tenant, subject_id="c-1", namespace="preference", key="tone", value="dry", provenance=GUESS
    )
    assert guess.consent_basis == "inferred"
    body = {
        "tenant": "acme",
        "subject_id": "c-1",
        "namespace": "preference",
        "key": "k",
        "value": 1,
        "provenance": said(),
        "consent_basis": "vibes",
    }
    assert api.post("/api/v1/memory/items/", body, format="json").status_code == 400
    body["consent_basis"] = "contract"
    assert api.post("/api/v1/memory/items/", body, format="json").json()["consent_basis"] == "contract"


def test_the_policy_holds_inferred_claims_refuses_wrong_bases_and_is_per_tenant(settings, tenant):
    settings.KEEPER_CONSENT_POLICY = POLICY
    with pytest.raises(ClaimPending) as waiting:
        infer(tenant)
    held = HeldClaim.objects.get(held_id=waiting.value.details["pending_id"])
    assert held.signals == ["unconfirmed"] and held.status == HeldStatus.HELD
    with pytest.raises(ConsentRequired):
        infer(tenant, basis="legitimate_interest")
    assert infer(tenant, basis="contract").value == "Porto"
    from core.tenancy import tenant_ensure

    other = tenant_ensure(slug="other", name="Other")
    assert infer(other).consent_basis == "inferred"  # this tenant's own rule accepts inferences


def test_the_subject_confirms_through_the_api_and_it_becomes_explicit_memory(settings, tenant):
    settings.KEEPER_CONSENT_POLICY = POLICY
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='ci', scope='write').plaintext}"
    )
    written = client.post(
        "/api/v1/memory/items/",
        {
            "subject_id": "c-1",
            "namespace": "profile",
            "key": "city",
            "value": "Porto",
            "provenance": GUESS,
            "consent_basis": "inferred",
        },
        format="json",
    )
    assert written.status_code == 202 and written.json()["error"]["code"] == "claim_pending_confirmation"
    assert memory_recall(tenant=tenant, subject_id="c-1") == []
    pending_id = written.json()["error"]["details"]["pending_id"]
    wrong = client.post(f"/api/v1/memory/pending/{pending_id}/confirm", {"subject_id": "c-2"}, format="json")
    assert wrong.status_code == 404
    confirmed = client.post(
        f"/api/v1/memory/pending/{pending_id}/confirm", {"subject_id": "c-1"}, format="json"
    )
    assert confirmed.status_code == 201, confirmed.json()
    item = confirmed.json()
    assert item["consent_basis"] == "explicit" and item["value"] == "Porto"
    assert item["provenance"]["validation_method"] == "explicit_user_confirmation"
    again = client.post(f"/api/v1/memory/pending/{pending_id}/confirm", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "pending_claim_decided"


def test_an_unconfirmed_claim_expires_and_the_purge_removes_it(settings, tenant):
    settings.KEEPER_CONSENT_POLICY = POLICY
    with pytest.raises(ClaimPending) as waiting:
        infer(tenant)
    pending_id = waiting.value.details["pending_id"]
    with pytest.raises(ClaimPending):
        infer(tenant, key="name", value="Ann")
    HeldClaim.objects.filter(held_id=pending_id).update(
        created_at=HeldClaim.objects.get(held_id=pending_id).created_at - timedelta(hours=73)
    )
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='ci', scope='write').plaintext}"
    )
    late = client.post(f"/api/v1/memory/pending/{pending_id}/confirm", {}, format="json")
    assert late.status_code == 409 and late.json()["error"]["code"] == "pending_claim_expired"
    memory_purge_expired()
    assert list(HeldClaim.objects.values_list("key", flat=True)) == ["name"]  # the fresh one still waits


def test_learning_sets_inferred_or_explicit_when_the_user_asked_to_be_remembered(settings, tenant):
    settings.KEEPER_CONSENT_POLICY = json.dumps({"*": {"constraint": ["explicit"]}})
    counts = memory_learn_from_events(
        tenant=tenant,
        subject_id="c-1",
        run_id="00000000-0000-0000-0000-000000000001",
        events=[
            said_event(1, "Please answer in Russian."),
            said_event(2, "Don't call me, email only. Remember that."),
        ],
    )
    items = {(m.namespace, m.key): m for m in memory_recall(tenant=tenant, subject_id="c-1")}
    assert items["preference", "language"].consent_basis == "inferred"
    constraint = [m for (ns, _), m in items.items() if ns == "constraint"]
    assert constraint and all(m.consent_basis == "explicit" for m in constraint)
    assert counts["pending"] == 0
    counts = memory_learn_from_events(
        tenant=tenant,
        subject_id="c-2",
        run_id="00000000-0000-0000-0000-000000000002",
        events=[said_event(1, "Don't call me, email only.")],
    )
    assert counts["pending"] >= 1 and memory_recall(tenant=tenant, subject_id="c-2") == []


def test_the_policy_is_read_from_the_environment_and_checked():
    env = {**os.environ, "KEEPER_CONSENT_POLICY": POLICY, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "from memory.consent import consent_policy_parse as p; print(p(settings.KEEPER_CONSENT_POLICY)['*'])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "('explicit', 'contract')" in out
    for bad in ("[1]", '{"*": {"profile": ["maybe"]}}', "not json"):
        with pytest.raises(ImproperlyConfigured):
            consent_policy_parse(bad)


def test_approving_a_waiting_claim_in_the_review_queue_confirms_it(settings, tenant):
    from memory.review import held_claim_approve

    settings.KEEPER_CONSENT_POLICY = POLICY
    with pytest.raises(ClaimPending) as waiting:
        infer(tenant)
    held_claim_approve(
        tenant=tenant, held_id=waiting.value.details["pending_id"], actor="user:t", note="phoned"
    )
    [item] = memory_recall(tenant=tenant, subject_id="c-1")
    assert item.consent_basis == "explicit"
    assert item.provenance["validation_method"] == "explicit_user_confirmation"
