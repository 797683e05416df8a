"""The retrieval API: index (JSON, base64, file upload), ACL, principals, search, snapshot and replay,
with a clear 4xx and nothing written for bad input."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from rest_framework.test import APIClient

from core.tenancy import tenant_scope
from retrieval.models import Chunk, Document
from tests.retrieval.pdfs import pdf_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(
        get_user_model().objects.create_user("kb", password="pw-for-tests", is_staff=True, is_superuser=True)
    )
    return client


def _document(**overrides):
    return {
        "tenant": "acme",
        "document_id": "policy-42",
        "source_uri": "s3://kb/policy-42.md",
        "source_version": "etag:1",
        "media_type": "text/markdown",
        "acl": ["group:support"],
        "text": "# Refunds\n\nRefunds are paid within 14 days.",
        "wait": True,
        **overrides,
    }


def test_index_search_snapshot_and_replay_over_http(api, tenant):
    created = api.post("/api/v1/retrieval/documents/", _document(), format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["document"]["status"] == "indexed" and created.json()["chunks"] == 1
    again = api.post("/api/v1/retrieval/documents/", _document(), format="json")
    assert again.status_code == 200 and again.json()["changed"] is False
    principal = api.post(
        "/api/v1/retrieval/principals/",
        {"tenant": "acme", "principal": "user:ann", "groups": ["group:support"]},
        format="json",
    )
    assert principal.status_code == 200
    found = api.post(
        "/api/v1/retrieval/search/",
        {"tenant": "acme", "principal": "user:ann", "query": "refunds"},
        format="json",
    ).json()
    [hit] = found["hits"]
    assert hit["chunk_id"] == "policy-42:s1:c1" and "14 days" in hit["text"]
    snapshot_id = found["retrieval_snapshot_id"]
    stored = api.get(f"/api/v1/retrieval/snapshots/{snapshot_id}/?tenant=acme").json()
    assert stored["hits"][0]["source_version"] == "etag:1" and "text" not in stored["hits"][0]
    api.post(
        "/api/v1/retrieval/documents/",
        _document(source_version="etag:2", text="Refunds within 30 days."),
        format="json",
    )
    replayed = api.get(f"/api/v1/retrieval/snapshots/{snapshot_id}/replay?tenant=acme").json()
    assert "14 days" in replayed["hits"][0]["text"]
    acl = api.put(
        "/api/v1/retrieval/documents/policy-42/acl", {"tenant": "acme", "acl": ["group:legal"]}, format="json"
    )
    assert acl.status_code == 200 and acl.json()["acl"] == ["group:legal"]
    assert (
        api.post(
            "/api/v1/retrieval/search/",
            {"tenant": "acme", "principal": "user:ann", "query": "refunds"},
            format="json",
        ).json()["hits"]
        == []
    )
    kinds = [e["kind"] for e in api.get("/api/v1/retrieval/invalidations/?tenant=acme").json()["results"]]
    assert kinds == ["acl_changed", "document_updated"]
    deleted = api.delete("/api/v1/retrieval/documents/policy-42/?tenant=acme")
    assert deleted.status_code == 200 and deleted.json()["chunks_deleted"] == 2
    assert api.get("/api/v1/retrieval/documents/policy-42/?tenant=acme").status_code == 404


@pytest.mark.parametrize("sent", ["team%2Fpolicies%2Frefunds", "team/policies/refunds"])
def test_a_document_id_with_slashes_can_be_read_given_an_acl_and_deleted(api, tenant, sent):
    """Created with "/" in its id (201), a document stays addressable: %2F arrives decoded."""
    doc = "team/policies/refunds"
    assert (
        api.post("/api/v1/retrieval/documents/", _document(document_id=doc), format="json").status_code == 201
    )
    got = api.get(f"/api/v1/retrieval/documents/{sent}/?tenant=acme")
    assert got.status_code == 200 and got.json()["document_id"] == doc
    acl = api.put(
        f"/api/v1/retrieval/documents/{sent}/acl", {"tenant": "acme", "acl": ["group:legal"]}, format="json"
    )
    assert acl.status_code == 200 and acl.json()["acl"] == ["group:legal"]
    deleted = api.delete(f"/api/v1/retrieval/documents/{sent}/?tenant=acme")
    assert deleted.status_code == 200 and deleted.json()["document_id"] == doc
    assert api.get(f"/api/v1/retrieval/documents/{sent}/?tenant=acme").status_code == 404


def test_a_pdf_upload_and_base64_content_are_indexed(api, tenant):
    upload = SimpleUploadedFile(
        "handbook.pdf",
        pdf_bytes([["Page one text"], [], ["Page three about refunds"]]),
        content_type="application/pdf",
    )
    body = {
        k: v
        for k, v in _document(document_id="handbook", media_type="application/pdf").items()
        if k != "text"
    }
    response = api.post(
        "/api/v1/retrieval/documents/", {**body, "acl": "group:support", "file": upload}, format="multipart"
    )
    assert response.status_code == 201, response.json()
    with tenant_scope(tenant.tenant_id):
        assert sorted(Chunk.objects.values_list("chunk_id", flat=True)) == [
            "handbook:p1:c1",
            "handbook:p3:c1",
        ]
    encoded = base64.b64encode(b"Plain text policy.").decode()
    response = api.post(
        "/api/v1/retrieval/documents/",
        _document(document_id="plain", media_type="text/plain", text=None, content_base64=encoded),
        format="json",
    )
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(
    ("overrides", "status", "code"),
    [
        ({"text": ""}, 422, "document_empty"),
        (
            {"text": None, "content_base64": base64.b64encode(bytes(range(256)) * 4).decode()},
            422,
            "document_unreadable",
        ),
        ({"text": None, "content_base64": "not base64!"}, 422, "invalid_document_content"),
        ({"content_base64": "eA=="}, 422, "invalid_document_content"),
        ({"text": "x" * 5000}, 413, "document_too_large"),
        ({"media_type": "image/png"}, 400, "invalid_input"),
        ({"acl": ["alice"]}, 422, "invalid_principal"),
        ({"acl": "group:a"}, 400, "invalid_input"),
        ({"document_id": "a:b"}, 422, "invalid_document_id"),
        ({"tenant": "nope"}, 404, "unknown_tenant"),
        ({"source_version": ""}, 400, "invalid_input"),
    ],
)
def test_bad_documents_get_a_clear_error_and_nothing_is_written(api, tenant, overrides, status, code):
    with override_settings(KEEPER_RETRIEVAL_MAX_BYTES=4096):
        response = api.post("/api/v1/retrieval/documents/", _document(**overrides), format="json")
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    with tenant_scope(tenant.tenant_id):
        assert not Document.objects.exists() and not Chunk.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"principal": "user:nobody", "query": "refunds"}, 404, "unknown_principal"),
        ({"principal": "user:ann", "query": ""}, 400, "invalid_input"),
        ({"principal": "user:ann", "query": "refunds", "k": 0}, 400, "invalid_input"),
        ({"principal": "user:ann", "query": "refunds", "run_id": "not-a-uuid"}, 400, "invalid_input"),
    ],
)
def test_bad_searches_get_a_clear_error(api, tenant, body, status, code):
    response = api.post("/api/v1/retrieval/search/", {"tenant": "acme", **body}, format="json")
    assert response.status_code == status and response.json()["error"]["code"] == code


def test_another_tenants_document_is_not_found(api, tenant, other_tenant):
    api.post("/api/v1/retrieval/documents/", _document(), format="json")
    slug = other_tenant.slug
    assert api.get(f"/api/v1/retrieval/documents/policy-42/?tenant={slug}").status_code == 404
    assert api.delete(f"/api/v1/retrieval/documents/policy-42/?tenant={slug}").status_code == 404
    response = api.put(
        "/api/v1/retrieval/documents/policy-42/acl", {"tenant": slug, "acl": []}, format="json"
    )
    assert response.status_code == 404
    with tenant_scope(tenant.tenant_id):
        assert Document.objects.get().acl == ["group:support"]


def test_documents_and_invalidations_are_listed_in_keyset_pages(api, tenant):
    """Both lists take `limit` and say there is more (not documents stopped at 500 with no word of more)."""
    for doc in ("doc-a", "doc-b", "doc-c"):
        assert (
            api.post("/api/v1/retrieval/documents/", _document(document_id=doc), format="json").status_code
            == 201
        )
    first = api.get("/api/v1/retrieval/documents/?tenant=acme&limit=2").json()
    assert [d["document_id"] for d in first["results"]] == ["doc-a", "doc-b"]
    assert first["next"] == {"after_document_id": "doc-b"}
    rest = api.get("/api/v1/retrieval/documents/?tenant=acme&limit=2&after_document_id=doc-b").json()
    assert [d["document_id"] for d in rest["results"]] == ["doc-c"] and rest["next"] is None
    changed = _document(document_id="doc-a", source_version="etag:2", text="# Refunds\n\nNow 10 days.")
    assert api.post("/api/v1/retrieval/documents/", changed, format="json").status_code in (200, 201)
    assert api.delete("/api/v1/retrieval/documents/doc-b/?tenant=acme").status_code == 200
    newest = api.get("/api/v1/retrieval/invalidations/?tenant=acme&limit=1").json()
    assert len(newest["results"]) == 1 and newest["next"] is not None
    older = api.get(
        f"/api/v1/retrieval/invalidations/?tenant=acme&before_id={newest['next']['before_id']}"
    ).json()
    assert older["results"] and older["next"] is None
    assert api.get("/api/v1/retrieval/invalidations/?tenant=acme&limit=0").status_code == 400
