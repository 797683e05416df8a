"""Bad input on the write endpoints: a 4xx with the error body, and nothing written."""

from __future__ import annotations

import json

import pytest

from core.tenancy import tenant_scope
from memory.models import MemoryItem
from retrieval.models import Document
from runs.kernel.models import AgentEvent, AgentRun
from tests.api.conftest import MEMORY_WRITE, key_client

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
        ("get", "/api/v1/runs/%0A%F2%AA%9D%B0/session/", None, 404),  # a newline and an unassigned character
        ("post", "/api/v1/operations/-1/reconcile", {"outcome": "applied", "note": "x"}, 404),
        ("get", "/api/v1/approvals/?status=bogus", None, 400),
        ("get", f"/api/v1/runs/{RUN}/events/?limit=", None, 400),
        # A filter given twice is refused, not read as one of its values.
        ("get", "/api/v1/runs/?status=running&status=completed", None, 400),
        ("get", f"/api/v1/runs/{RUN}/events/?limit=1&limit=2", None, 400),
        ("get", "/api/v1/memory/items/?subject_id=a&subject_id=b", None, 400),
        # A number where the schema says text is refused, not turned into its digits: erasing subject
        # "42" because a client sent 42 could not be undone.
        ("post", "/api/v1/erasure-requests/", {"subject_id": 42}, 400),
        (
            "post",
            "/api/v1/memory/items/",
            {"subject_id": "c", "namespace": 42, "key": "k", "value": 1, "provenance": {}},
            400,
        ),
        ("post", "/api/v1/retrieval/search/", {"principal": "user:a", "query": 42}, 400),
        (
            "post",
            "/api/v1/retrieval/documents/",
            {"document_id": -1, "source_uri": "s", "source_version": "1", "acl": [], "text": "t"},
            400,
        ),
        ("post", "/api/v1/runs/", {"workflow": 7, "input": {}}, 400),
        # A deadline past the calendar is a 422, not a 500; provenance is not any JSON.
        (
            "post",
            "/api/v1/runs/",
            {"workflow": "demo.countdown", "input": {"n": 1, "budgets": {"deadline_s": 1e12}}},
            422,
        ),
        (
            "post",
            "/api/v1/runs/",
            {"workflow": "demo.countdown", "input": {"n": 1, "budgets": {"tokens": 1e300}}},
            422,
        ),
        *[
            (
                "post",
                "/api/v1/memory/items/",
                {
                    "subject_id": "c",
                    "namespace": "n",
                    "key": "k",
                    "value": 1,
                    "provenance": {
                        "source_type": "user_statement",
                        "source_id": "chat:1",
                        "source_version": None,
                        "run_id": None,
                        "event_seq": None,
                        "validation_method": "user_statement",
                        **bad,
                    },
                },
                422,
            )
            for bad in (
                {"event_seq": True},
                {"event_seq": -3},
                {"event_seq": 2**63},
                {"run_id": 42},
                {"source_version": 7},
            )
        ],
        (
            "post",
            "/api/v1/retrieval/documents/",
            {
                "document_id": "d",
                "source_uri": "s",
                "source_version": "1",
                "acl": [],
                "text": "t",
                "wait": "false",
            },
            400,
        ),
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
    too_large = client.post("/api/v1/runs/", huge, content_type="application/json")
    _assert_error(too_large, 413, "request_too_large")
    assert too_large.json()["error"]["details"] == {"max_bytes": 10_000}  # what the client may send instead
    assert AgentRun.objects.count() == 0


@pytest.mark.parametrize("depth", [65, 600, 5000])
def test_json_nested_too_deep_is_refused_and_writes_nothing(tenant, write_key, depth):
    """Hundreds of levels overflowed Python's recursion: a 500 from the parser (1,000 levels), or a
    run created whose every resume then failed (600 levels). More than 64 levels is a 400."""
    client = key_client(write_key)
    deep = "[" * depth + "]" * depth
    for url, body in (
        ("/api/v1/runs/", '{"workflow": "conversation", "input": {"x": %s}}'),
        (
            "/api/v1/memory/items/",
            '{"subject_id": "c", "namespace": "n", "key": "k", "value": %s, "provenance": {}}',
        ),
    ):
        answer = client.post(url, body % deep, content_type="application/json")
        _assert_error(answer, 400, "parse_error")
        assert "nested deeper than 64 levels" in answer.json()["error"]["message"]
    with tenant_scope(tenant.tenant_id):
        assert (AgentRun.objects.count(), MemoryItem.objects.count()) == (0, 0)


def test_json_64_levels_deep_is_taken(tenant, write_key):
    client = key_client(write_key)
    body = '{"workflow": "conversation", "input": {"x": %s}}' % ("[" * 62 + "]" * 62)
    assert client.post("/api/v1/runs/", body, content_type="application/json").status_code == 201


def test_a_run_started_in_process_with_input_too_deep_is_refused(tenant):
    from core.errors import InvalidInput
    from runs.engine.runs import run_start

    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidInput) as refused:
        run_start(tenant=tenant, workflow_name="conversation", input={"x": deep}, actor="t")
    assert refused.value.code == "input_too_deep"


def test_a_subject_id_is_taken_exactly_as_sent_and_too_long_is_refused(write_key):
    """The schema says at most 200 characters: 205 characters of which 5 are padding are 205, not
    a trimmed 200 (schemathesis found the mismatch), and an id is never silently changed."""
    client = key_client(write_key)
    padded = "\x1d    " + "x" * 200
    answer = client.post("/api/v1/erasure-requests/", {"subject_id": padded}, format="json")
    assert answer.status_code == 400 and "subject_id" in answer.json()["error"]["details"]


@pytest.mark.django_db
def test_a_misspelt_field_of_a_run_is_refused_not_dropped(write_key):
    """A misspelt "subjct" is refused, not dropped: a run started with no subject is one no erasure of
    that person would ever find."""
    client = key_client(write_key)
    answer = client.post(
        "/api/v1/runs/", {"workflow": "demo.countdown", "input": {"n": 1}, "subjct": "cust-1"}, format="json"
    )
    assert answer.status_code == 400 and "subjct" in answer.json()["error"]["details"], answer.content
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/webhooks/", {"url": "https://hooks.example.com/k", "event_types": ["run.completed"]}),
        ("/api/v1/memory/write", MEMORY_WRITE),
        ("/api/v1/erasure-requests/", {"subject_id": "c-1"}),
        ("/api/v1/retrieval/search/", {"query": "refund", "principal": "group:support"}),
    ],
)
def test_an_unknown_field_of_any_body_is_refused_not_dropped(write_key, path, body):
    """Webhooks, memory writes, erasure requests, searches (and forks, external workflows) refuse
    "unknown_zz" as runs refuse "subjct", instead of taking it without a word."""
    answer = key_client(write_key).post(path, {**body, "unknown_zz": 1}, format="json")
    assert answer.status_code == 400, answer.content
    assert "unknown_zz" in answer.json()["error"]["details"], answer.content


def test_the_worker_protocols_pattern_fields_take_only_text():
    """operation_id 42 was stored as operation "42" (DRF's RegexField turns a number into its digits)."""
    from rest_framework.exceptions import ValidationError

    from runs.api_worker_operations import WorkerOperationPrepareApi

    fields = WorkerOperationPrepareApi.InputSerializer().fields
    for bad in (42, 4.5, True):
        with pytest.raises(ValidationError):
            fields["operation_id"].run_validation(bad)
    assert fields["operation_id"].run_validation("refund:o-1") == "refund:o-1"


def _body_serializers():
    """Every serializer a view takes a JSON body with (not its query's FilterSerializer, not an output)."""
    from django.urls import URLPattern, URLResolver, get_resolver
    from rest_framework import serializers

    def views(patterns):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from views(p.url_patterns)
            elif isinstance(p, URLPattern) and hasattr(p.callback, "view_class"):
                yield p.callback.view_class

    seen = set()
    for view in views(get_resolver().url_patterns):
        for name in dir(view):
            found = getattr(view, name, None)
            if (
                isinstance(found, type)
                and issubclass(found, serializers.Serializer)
                and "Filter" not in name
                and "Output" not in name
                and found not in seen
            ):
                seen.add(found)
                yield f"{view.__name__}.{name}", found


def test_every_number_and_flag_of_a_json_body_takes_only_its_json_type():
    """`{"k": "10"}` is refused as `{"k": 10.5}` is, not searched with k=10. A JSON
    body's numbers and flags are taken only as JSON numbers and true/false, as its text is taken only
    as JSON strings (the document upload's `wait` takes a form's "true" only from a multipart body)."""
    from rest_framework import serializers

    from core.api import StrictBooleanField, StrictFloatField, StrictIntegerField

    loose = []

    def check(where, field):
        if isinstance(field, serializers.BaseSerializer) and hasattr(field, "fields"):
            for name, child in field.fields.items():
                check(f"{where}.{name}", child)
        elif isinstance(field, serializers.ListField | serializers.DictField):
            check(f"{where}[]", field.child)
        elif isinstance(
            field, serializers.IntegerField | serializers.FloatField | serializers.BooleanField
        ) and not isinstance(field, StrictIntegerField | StrictFloatField | StrictBooleanField):
            loose.append(where)

    bodies = list(_body_serializers())
    assert len(bodies) > 20
    for where, serializer in bodies:
        check(where, serializer())
    assert loose == []
    fields = {"k": StrictIntegerField(), "x": StrictFloatField(), "on": StrictBooleanField()}
    for name, good, bads in (
        ("k", 10, ("10", 10.5, True, None)),
        ("x", 1.5, ("1.5", True, None)),
        ("on", False, ("false", 0, "no", None)),
    ):
        assert fields[name].run_validation(good) == good
        for bad in bads:
            with pytest.raises(serializers.ValidationError):
                fields[name].run_validation(bad)


def test_a_search_with_k_as_text_is_refused(write_key):
    response = key_client(write_key).post(
        "/api/v1/retrieval/search/", {"principal": "user:a", "query": "q", "k": "10"}, format="json"
    )
    _assert_error(response, 400)
    assert "k" in response.json()["error"]["details"]


@pytest.mark.django_db
def test_an_unknown_field_of_a_decision_a_search_or_a_worker_s_suspend_is_refused(write_key, tenant):
    """Approve, reconcile ("resme": true is not ignored without a word), the memory search body,
    messages, LangGraph answers and the worker commit's nested objects refuse unknown fields too."""
    client = key_client(write_key)
    search = client.post("/api/v1/memory/search/", {"query": "x", "zz_unknown": 1}, format="json")
    assert search.status_code == 400 and "zz_unknown" in search.json()["error"]["details"], search.content
    reconcile = client.post(
        "/api/v1/operations/1/reconcile", {"outcome": "applied", "note": "n", "resme": True}, format="json"
    )
    assert reconcile.status_code == 400 and "resme" in reconcile.json()["error"]["details"], reconcile.content
