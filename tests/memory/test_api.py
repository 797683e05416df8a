"""The memory and erasure API: clear 4xx reasons, tenant explicit, erasure with a receipt."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from memory.erasure import erasure_execute
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(
        get_user_model().objects.create_user(
            "comp", password="pw-for-tests", is_staff=True, is_superuser=True
        )
    )
    return client


def test_remember_recall_search_and_erase_over_http(api, tenant):
    body = {
        "tenant": "acme",
        "subject_id": "c-1",
        "namespace": "preference",
        "key": "language",
        "value": "answer in Russian",
        "provenance": said(),
    }
    created = api.post("/api/v1/memory/items/", body, format="json")
    assert created.status_code == 201 and created.json()["provenance"]["event_seq"] == 3
    recalled = api.get("/api/v1/memory/items/?tenant=acme&subject_id=c-1").json()["results"]
    assert [r["value"] for r in recalled] == ["answer in Russian"]
    from memory.projection import memory_project

    memory_project(tenant=tenant)
    hits = api.get("/api/v1/memory/search/?tenant=acme&query=Russian").json()["results"]
    assert hits[0]["item"]["key"] == "language"
    erasure = api.post("/api/v1/erasure-requests/", {"tenant": "acme", "subject_id": "c-1"}, format="json")
    assert erasure.status_code == 202
    request_id = erasure.json()["request_id"]
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request_id)
    receipt = api.get(f"/api/v1/erasure-requests/{request_id}/?tenant=acme").json()
    assert receipt["status"] == "completed" and receipt["receipt"]["counts"]["memory_items"] == 1
    assert api.get("/api/v1/memory/items/?tenant=acme&subject_id=c-1").json()["results"] == []


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (
            {"tenant": "acme", "subject_id": "c", "namespace": "p", "key": "k", "value": 1, "provenance": {}},
            422,
            "invalid_provenance",
        ),
        (
            {
                "tenant": "nope",
                "subject_id": "c",
                "namespace": "p",
                "key": "k",
                "value": 1,
                "provenance": said(),
            },
            404,
            "unknown_tenant",
        ),
        (
            {
                "tenant": "acme",
                "subject_id": "c",
                "namespace": "profile",
                "key": "diagnosis",
                "value": "flu",
                "provenance": said(source_type="model_inference", validation_method="unvalidated"),
            },
            422,
            "sensitive_inference_refused",
        ),
        (
            {
                "tenant": "acme",
                "subject_id": "c",
                "namespace": "profile",
                "key": "mood",
                "value": "angry",
                "provenance": said(source_type="model_inference", validation_method="unvalidated"),
            },
            422,
            "state_of_mind_not_kept",
        ),
        ({"tenant": "acme"}, 400, "invalid_input"),
    ],
)
def test_bad_memory_writes_get_a_reason(api, tenant, body, status, code):
    response = api.post("/api/v1/memory/items/", body, format="json")
    assert response.status_code == status and response.json()["error"]["code"] == code
