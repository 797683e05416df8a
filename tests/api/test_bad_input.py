"""Bad input on the write endpoints: a 4xx with the error body, and nothing written."""

from __future__ import annotations

import json

import pytest

from core.tenancy import tenant_scope
from memory.models import MemoryItem
from retrieval.models import Document
from runs.engine.models import AgentEvent, AgentRun
from tests.api.conftest import key_client

pytestmark = pytest.mark.django_db

RUN = "00000000-0000-0000-0000-000000000001"


def _assert_error(response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    if code is not None:
        assert error["code"] == code


@pytest.mark.parametrize(
    ("method", "url", "body", "status"),
    [
        ("post", "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown"}, 400),  # missing input
        ("post", "/api/v1/runs/", {"tenant": ["acme"], "workflow": "demo.countdown", "input": {}}, 400),
        ("post", "/api/v1/runs/", {"tenant": "acme", "workflow": "no.such.flow", "input": {}}, 422),
        (
            "post",
            "/api/v1/memory/items/",
            {
                "tenant": "acme",
                "subject_id": "c",
                "namespace": "n",
                "key": "k",
                "value": 1,
                "provenance": "not a dict",
            },
            400,
        ),
        (
            "post",
            "/api/v1/memory/items/",
            {
                "tenant": "acme",
                "subject_id": "c" * 201,
                "namespace": "n",
                "key": "k",
                "value": 1,
                "provenance": {},
            },
            400,
        ),
        (
            "post",
            "/api/v1/retrieval/documents/",
            {
                "tenant": "acme",
                "document_id": "d",
                "source_uri": "s",
                "source_version": "1",
                "acl": "group:x",
                "text": "t",
            },
            400,
        ),
        (
            "post",
            "/api/v1/retrieval/documents/",
            {
                "tenant": "acme",
                "document_id": "d",
                "source_uri": "s",
                "source_version": "1",
                "acl": [],
                "media_type": "image/gif",
                "text": "t",
            },
            400,
        ),
        (
            "post",
            "/api/v1/retrieval/search/",
            {"tenant": "acme", "principal": "user:a", "query": "q", "k": 0},
            400,
        ),
        (
            "post",
            "/api/v1/retrieval/search/",
            {"tenant": "acme", "principal": "user:a", "query": "q", "run_id": "not-a-uuid"},
            400,
        ),
        ("post", "/api/v1/operations/1/reconcile", {"outcome": "perhaps", "note": "x"}, 400),  # unknown enum
        ("post", f"/api/v1/runs/{RUN}/messages/", {"type": "bogus", "client_message_id": "m"}, 400),
        ("post", f"/api/v1/runs/{RUN}/fork", {"at_seq": "three"}, 400),
        ("post", "/api/v1/runs/not-a-uuid/cancel", {"note": "x"}, 404),  # invalid UUID: no such URL
        ("get", "/api/v1/runs/not-a-uuid/", None, 404),
        ("get", "/api/v1/runs/%0A%F2%AA%9D%B0/session/", None, 404),  # found by schemathesis: a newline
        ("post", "/api/v1/operations/-1/reconcile", {"outcome": "applied", "note": "x"}, 404),
        ("get", "/api/v1/approvals/?status=bogus", None, 400),
        ("get", f"/api/v1/runs/{RUN}/events/?limit=", None, 400),
    ],
)
def test_bad_input_answers_4xx_with_the_error_body_and_writes_nothing(
    tenant, write_key, method, url, body, status
):
    client = key_client(write_key)
    response = (
        getattr(client, method)(url, body, format="json")
        if body is not None
        else getattr(client, method)(url)
    )
    _assert_error(response, status)
    with tenant_scope(tenant.tenant_id):
        assert (
            AgentRun.objects.count(),
            AgentEvent.objects.count(),
            MemoryItem.objects.count(),
            Document.objects.count(),
        ) == (0, 0, 0, 0)


def test_malformed_json_and_oversize_bodies_are_refused(tenant, write_key, settings):
    client = key_client(write_key)
    _assert_error(
        client.post("/api/v1/runs/", "{not json", content_type="application/json"), 400, "parse_error"
    )
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    huge = json.dumps({"tenant": "acme", "workflow": "demo.countdown", "input": {"blob": "x" * 20_000}})
    _assert_error(
        client.post("/api/v1/runs/", huge, content_type="application/json"), 413, "request_too_large"
    )
    assert AgentRun.objects.count() == 0


def test_a_subject_id_is_taken_exactly_as_sent_and_too_long_is_refused(write_key):
    """The schema says at most 200 characters: 205 characters of which 5 are padding are 205, not
    a trimmed 200 (schemathesis found the mismatch), and an id is never silently changed."""
    client = key_client(write_key)
    padded = "\x1d    " + "x" * 200
    answer = client.post("/api/v1/erasure-requests/", {"subject_id": padded}, format="json")
    assert answer.status_code == 400 and "subject_id" in answer.json()["error"]["details"]
