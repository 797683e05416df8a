"""A control character (NUL above all: PostgreSQL refuses it in any text) in any path parameter of
the API's or the console's URL map answers 404 or 400, never 500."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Group
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from console.models import Membership
from console.roles import ROLES
from tests.api.conftest import key_client, seed_tenant

pytestmark = pytest.mark.django_db

BAD = ["\x00", "a\x00b", "\x01", "\x1f", "\x7f", "\n", "\t"]
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _routes(resolver: URLResolver, prefix: str = "") -> list[tuple[str, Any]]:
    """(route with <parameters>, pattern) of every path() in the URL map, includes followed."""
    found = []
    for entry in resolver.url_patterns:
        route = str(entry.pattern)
        if not hasattr(entry.pattern, "_route"):  # a regular expression (the API's catch-all 404)
            continue
        if isinstance(entry, URLResolver):
            found += _routes(entry, prefix + route)
        elif isinstance(entry, URLPattern):
            found.append((prefix + route, entry))
    return found


def _with_parameters() -> list[str]:
    routes = [route for route, _ in _routes(get_resolver()) if PARAMETER.search(route)]
    return [r for r in routes if not r.startswith("admin/")]


def _urls(route: str, valid: dict[str, Any]) -> list[str]:
    """For each parameter of the route, each bad value in it (the others valid)."""
    names = PARAMETER.findall(route)
    urls = []
    for name in names:
        for bad in BAD:
            values = {n: quote(str(valid.get(n, "x")), safe="") for n in names}
            values[name] = quote("x" + bad if bad != "\x00" else bad, safe="")
            urls.append("/" + _fill(route, values))
    return urls


def _fill(route: str, values: dict[str, str]) -> str:
    return PARAMETER.sub(lambda m: values[m[1]], route)


def test_every_route_answers_a_control_character_in_a_path_parameter_with_404_or_400(
    tenant, write_key, django_user_model
):
    valid = {**seed_tenant(tenant), "tenant": tenant.slug}
    staff = APIClient()
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    for role in ROLES:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    Membership.objects.create(user=user, tenant=tenant)
    staff.force_login(user)
    routes = _with_parameters()
    assert any(r.startswith("api/v1/retrieval/documents/<path:document_id>") for r in routes)
    assert any(r.startswith("compliance/<str:tenant>") for r in routes)
    answered = 0
    for route in routes:
        for url in _urls(route, valid):
            clients = [staff, key_client(write_key)] if url.startswith("/api/") else [staff]
            for client in clients:
                for method in ("get", "post"):
                    response = getattr(client, method)(url)
                    # The sandbox (an external system) checks its own ids; it may refuse the method first.
                    allowed = (400, 404, 405) if url.startswith("/sandbox/") else (400, 404)
                    assert response.status_code in allowed, (route, url, method, response.status_code)
                    if url.startswith("/api/"):
                        assert response.json()["error"]["code"] in ("not_found", "invalid_input")
                    answered += 1
    assert answered > 100


def test_a_nul_in_a_query_value_is_a_400(write_key, admin_client):
    response = key_client(write_key).get("/api/v1/memory/items/?subject_id=%00&tenant=acme")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_input"
    assert admin_client.get("/audit/?target=%00").status_code == 400  # was a DataError: 500


def test_the_documented_probe_answers_404(write_key):
    response = key_client(write_key).get("/api/v1/retrieval/documents/%00/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_a_nul_in_a_console_form_field_is_a_400(client, admin_client, tenant):
    """A NUL in the sign-in form (no session needed), the admin's login and the compliance erase and
    memory.md forms is a 400 before it reaches PostgreSQL (there, a 500)."""
    from django.test import Client

    checked = Client(enforce_csrf_checks=True)
    checked.get("/sign-in/")
    token = checked.cookies["csrftoken"].value
    signed = checked.post("/sign-in/", {"username": "a\x00b", "password": "x", "csrfmiddlewaretoken": token})
    assert signed.status_code == 400 and b"NUL" in signed.content
    assert client.post("/admin/login/", {"username": "a\x00b", "password": "x"}).status_code == 400
    erase = admin_client.post(
        "/compliance/acme/erase/", {"subject": "a\x00b", "subject_confirm": "x", "note": "x"}
    )
    assert erase.status_code == 400
    upload = admin_client.post("/compliance/acme/memory-md/", {"subject": "a\x00b", "file": ""})
    assert upload.status_code == 400
    # An ordinary form still goes through (the body was read once, by the guard, and kept).
    fine = checked.post("/sign-in/", {"username": "nobody", "password": "x", "csrfmiddlewaretoken": token})
    assert fine.status_code in (200, 400) and b"NUL" not in fine.content


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/operations/1/reconcile", '{"outcome": "\\ud800", "note": "n"}'),
        (
            "/api/v1/memory/write",
            '{"subject_id": "c-1", "namespace": "p", "key": "k", "value": "v", "consent_basis": "\\udfff"}',
        ),
        ("/api/v1/runs/", '{"workflow": "demo.countdown", "input": {"n": 1, "\\ud83d": "x"}}'),
    ],
)
def test_a_lone_surrogate_in_a_json_body_is_a_400(write_key, path, body):
    """A choice field would echo "\\ud800" in its error, which the renderer cannot encode: the
    connection would drop with no answer (a 500 without DEBUG)."""
    response = key_client(write_key).post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "parse_error" and "lone UTF-16 surrogate" in error["message"]
    # A pair is one character, and fine.
    pair = key_client(write_key).post(
        "/api/v1/runs/",
        '{"workflow": "demo.countdown", "input": {"n": 1, "note": "\\ud83d\\ude00"}}',
        content_type="application/json",
    )
    assert pair.status_code == 201, pair.content
