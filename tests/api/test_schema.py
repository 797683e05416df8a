"""The OpenAPI schema: valid, without warnings, served, and describing every URL of the API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")


def _api_routes(patterns: list, prefix: str = "") -> list[tuple[str, type]]:
    """(route, view class) of every DRF view under the URL map, with included prefixes joined."""
    routes = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            routes += _api_routes(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern) and hasattr(entry.callback, "view_class"):
            routes.append((prefix + str(entry.pattern), entry.callback.view_class))
    return routes


def test_the_schema_validates_without_warnings(tmp_path: Path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert schema["openapi"].startswith("3.") and schema["info"]["title"] == "Keeper API"
    assert schema["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "kp_<prefix>_<secret>",
    }


def test_every_api_url_and_method_is_in_the_schema():
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    routes = [(r, v) for r, v in _api_routes(get_resolver().url_patterns) if r.startswith("api/v1/")]
    assert len(routes) >= 30
    expected = {
        ("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route), method)
        for route, view in routes
        for method in METHODS
        if hasattr(view, method)
    }
    documented = {
        (path, method) for path, ops in schema["paths"].items() for method in ops if method in METHODS
    }
    assert expected == documented
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            statuses = set(op["responses"])
            assert {"400", "401", "403", "404", "429"} <= statuses, (path, method)
            assert any(s.startswith("2") for s in statuses), (path, method)
            if method in ("post", "put") and "requestBody" in op:
                assert "examples" in next(iter(op["requestBody"]["content"].values())), (path, method)


def test_the_docs_are_served_from_local_static_files():
    page = APIClient().get("/api/docs/")
    assert page.status_code == 200 and b"swagger-ui" in page.content
    assert b"cdn.jsdelivr" not in page.content and b"unpkg" not in page.content
