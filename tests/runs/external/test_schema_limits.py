"""Registering an external workflow costs the server time in proportion to its input_schema, within
limits a 422 names: 12,000 anchor references (188 KiB) took 181 s of CPU, a 2.4 MiB anyOf 25-67 s,
and four such registrations stalled a web process for every other tenant."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from core.api_auth import api_key_create
from core.processes import stop_groups
from core.tenancy import tenant_ensure
from runs.api_external_workflows import MAX_REGISTRATION_BYTES
from runs.external.schema_index import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_REFERENCES,
    MAX_SCHEMA_SUBSCHEMAS,
)
from runs.external.schemas import schema_checked
from tests.processes import web_serve

D4 = "http://json-schema.org/draft-04/schema#"


def anchored(n: int) -> dict[str, Any]:
    """n definitions, each with an anchor, and n properties referring to them by anchor."""
    return {
        "$defs": {f"d{i}": {"$anchor": f"a{i}", "type": "string"} for i in range(n)},
        "properties": {f"p{i}": {"$ref": f"#a{i}"} for i in range(n)},
    }


def branches(n: int) -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "object", "properties": {f"k{i}": {"type": "string", "minLength": i}}} for i in range(n)
        ]
    }


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"not": schema}
    return schema


HOSTILE = {
    # 188 KiB: each reference resolved by a walk of the whole schema took 181 s of CPU
    "12,000 anchor references": {"$defs": {"a": {"$anchor": "a"}}, "allOf": [{"$ref": "#a"}] * 12_000},
    "a 2.4 MiB anyOf": branches(28_000),
}


class OverBudget(BaseException):
    """Past the work budget (a BaseException: the code under test catches Exception)."""


@contextmanager
def work_budget(calls: int) -> Iterator[Callable[[], int]]:
    """Counts the Python function calls this thread makes in the block, and stops it past `calls`:
    a measure of work that a loaded machine does not change."""
    made = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal made
        if event == "call":
            made += 1
            if made > calls:
                sys.setprofile(None)
                raise OverBudget(f"over {calls} calls")

    sys.setprofile(count)
    try:
        yield lambda: made
    finally:
        sys.setprofile(None)


def _work(schema: dict[str, Any]) -> int:
    with work_budget(10**7) as made:
        with suppress(Exception):  # the work is measured, accepted or refused
            schema_checked(schema)
        return made()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_schema_is_refused_before_any_work_that_grows_with_it(name):
    with work_budget(1_000), pytest.raises(Exception, match="input_schema is too large") as refused:
        schema_checked(HOSTILE[name])
    assert refused.value.code == "input_schema_too_large"


def test_registration_work_grows_linearly_with_the_references():
    # each reference was resolved by walking the whole schema: double the references, four times the
    # work (on the old code 2.55 times here already, and 181 s at 12,000)
    small, large = _work(anchored(MAX_SCHEMA_REFERENCES // 2)), _work(anchored(MAX_SCHEMA_REFERENCES))
    assert large / small < 2.2, (small, large)


def test_the_metaschema_check_compares_enum_items_in_linear_time():
    # draft 4's metaschema asks uniqueItems of enum, which jsonschema checked pair by pair (59 s)
    schema = {"$schema": D4, "enum": [{"a": i} for i in range(5_000)]}
    assert len(json.dumps(schema)) < MAX_SCHEMA_BYTES
    with work_budget(200_000):
        assert schema_checked(schema) == schema


def _register(api, schema: dict[str, Any]):
    return api.post(
        "/api/v1/workflows/external/",
        {"name": "ot.big", "version": "1", "steps": ["a"], "input_schema": schema},
        format="json",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("schema", "limit", "maximum"),
    [
        (HOSTILE["12,000 anchor references"], "bytes of JSON", MAX_SCHEMA_BYTES),
        (branches(1_000), "bytes of JSON", MAX_SCHEMA_BYTES),
        (nested(MAX_SCHEMA_DEPTH), "levels of nesting", MAX_SCHEMA_DEPTH),
        ({"anyOf": [{}] * (MAX_SCHEMA_SUBSCHEMAS + 1)}, "schemas within it", MAX_SCHEMA_SUBSCHEMAS),
        ({"anyOf": [True] * (MAX_SCHEMA_SUBSCHEMAS + 1)}, "schemas within it", MAX_SCHEMA_SUBSCHEMAS),
        (
            {"$defs": {"s": {}}, "allOf": [{"$ref": "#/$defs/s"}] * (MAX_SCHEMA_REFERENCES + 1)},
            "references",
            MAX_SCHEMA_REFERENCES,
        ),
    ],
)
def test_a_schema_past_a_limit_is_a_422_naming_it(api, schema, limit, maximum):
    r = _register(api, schema)
    assert r.status_code == 422, r.content
    error = r.json()["error"]
    assert error["code"] == "input_schema_too_large"
    assert error["details"] == {"limit": limit, "maximum": maximum}
    assert f"at most {maximum:,} {limit}" in error["message"]


@pytest.mark.django_db
def test_a_registration_body_past_its_limit_is_refused_before_it_is_parsed(api):
    big = api.post(
        "/api/v1/workflows/external/",
        json.dumps(
            {"name": "ot.big", "version": "1", "steps": ["a"], "input_schema": HOSTILE["a 2.4 MiB anyOf"]}
        ),
        content_type="application/json",
    )
    unparsed = api.post(
        "/api/v1/workflows/external/", "{" * (MAX_REGISTRATION_BYTES + 1), content_type="application/json"
    )
    for r in (big, unparsed):  # not a 400 for JSON that was never read
        assert r.status_code == 413, r.content
        assert r.json()["error"]["code"] == "request_too_large"
        assert r.json()["error"]["details"] == {
            "limit": "bytes of the body",
            "maximum": MAX_REGISTRATION_BYTES,
        }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"deep": nested(MAX_SCHEMA_DEPTH - 3)}},  # 32 levels: top, properties, 30 nots
        {"anyOf": [{}] * (MAX_SCHEMA_SUBSCHEMAS - 1)},  # and the top: 1,000 schemas
        {"$defs": {"s": {}}, "allOf": [{"$ref": "#/$defs/s"}] * MAX_SCHEMA_REFERENCES},
        {"enum": ["x" * 1000] * 63 + ["x" * (MAX_SCHEMA_BYTES - 63 * 1003 - 13)]},  # 65,536 bytes
    ],
    ids=["depth", "schemas", "references", "bytes"],
)
def test_a_schema_at_a_limit_registers(api, schema):
    assert len(json.dumps(schema, separators=(",", ":"))) <= MAX_SCHEMA_BYTES
    r = _register(api, schema)
    assert r.status_code == 201, r.content


# --- beside another tenant's traffic, on the web server `make run` starts -------------------------


def _call(method: str, url: str, key: str, body: Any = None, timeout: float = 120) -> tuple[int, float, str]:
    request = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    return status, time.monotonic() - started, text.decode(errors="replace")[:300]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hostile_registrations_do_not_stall_another_tenants_requests(tmp_path: Path):
    attacker = api_key_create(tenant=tenant_ensure(slug="mallory"), name="m", scope="write").plaintext
    other = api_key_create(tenant=tenant_ensure(slug="globex"), name="g", scope="read").plaintext
    web, base = web_serve(tmp_path / "web.log")
    try:
        listing = f"{base}/api/v1/workflows/external/"
        before = [_call("GET", listing, other)[1] for _ in range(5)]
        # as many as the web process has threads, each the worst the limits let through or far past them
        schemas = [
            *HOSTILE.values(),
            branches(MAX_SCHEMA_SUBSCHEMAS // 2 - 1),
            anchored(MAX_SCHEMA_REFERENCES),
        ]
        answers: list[tuple[int, float, str]] = []

        def register(i: int, schema: dict[str, Any]) -> None:
            body = {"name": f"evil{i}", "version": "1", "steps": ["a"], "input_schema": schema}
            answers.append(_call("POST", listing, attacker, body))

        threads = [threading.Thread(target=register, args=(i, s)) for i, s in enumerate(schemas)]
        for thread in threads:
            thread.start()
        during: list[float] = []
        while any(t.is_alive() for t in threads):
            status, took, _ = _call("GET", listing, other, timeout=60)
            assert status == 200
            during.append(took)
        for thread in threads:
            thread.join()
    finally:
        stop_groups([web], grace=5)
    assert sorted(status for status, _, _ in answers) == [201, 201, 413, 422], answers
    # Generous bounds (a shared 2-core machine): each registration ends within seconds, and the
    # other tenant is answered throughout (stalled, it waited minutes for a thread).
    assert max(took for _, took, _ in answers) < 30, answers
    assert during and max(during) < max(10.0, 20 * max(before)), (before, during)
