"""A tenant's input_schema is applied by Keeper's web threads: a pattern that backtracks without end
or a reference the schema cannot follow is a 4xx with its reason, never a hung thread or a 500
(found from outside: a killed gunicorn process, and 500s on every start)."""

from __future__ import annotations

import time

import pytest
from jsonschema import _keywords, _legacy_keywords, _utils

from runs.engine.models import AgentRun
from runs.external.schemas import PATTERN_SECONDS, input_validator

pytestmark = pytest.mark.django_db

EVIL = "(.*?,){30}x"  # backtracks without end on commas without the x, in `re` and in `regex` alike
SLOW_INPUT = "," * 50 + "y"
GOOD = "," * 30 + "x"


def _register(api, name: str, schema: dict) -> object:
    return api.post(
        "/api/v1/workflows/external/",
        {"name": name, "version": "1", "steps": ["a"], "input_schema": schema},
        format="json",
    )


@pytest.mark.parametrize(
    ("schema", "data", "fine"),
    [
        ({"properties": {"a": {"pattern": EVIL}}}, {"a": SLOW_INPUT}, {"a": GOOD}),
        ({"patternProperties": {EVIL: {"type": "string"}}}, {SLOW_INPUT: "x"}, {GOOD: "x"}),
        (
            {"patternProperties": {EVIL: {"type": "string"}}, "additionalProperties": False},
            {SLOW_INPUT: "x"},
            {GOOD: "x"},
        ),
        ({"propertyNames": {"pattern": EVIL}}, {SLOW_INPUT: 1}, {GOOD: 1}),
    ],
)
def test_a_pattern_that_backtracks_without_end_refuses_the_start_in_bounded_time(
    api, tenant, schema, data, fine
):
    assert _register(api, "ot.evil", schema).status_code == 201
    started = time.monotonic()
    r = api.post("/api/v1/runs/", {"workflow": "ot.evil", "input": data}, format="json")
    assert time.monotonic() - started < 20 * PATTERN_SECONDS + 5
    assert r.status_code == 422, r.content
    assert (
        r.json()["error"]["code"] == "input_schema_pattern_too_slow" and EVIL in r.json()["error"]["message"]
    )
    assert not AgentRun.objects.filter(workflow_name="ot.evil").exists()
    matched = api.post("/api/v1/runs/", {"workflow": "ot.evil", "input": fine}, format="json")
    assert matched.status_code == 201, matched.content  # an input the pattern matches starts as before


def test_patterns_still_decide_as_json_schema_says():
    check = input_validator(
        {
            "properties": {"code": {"pattern": "^[A-Z]{3}-\\d+$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
        }
    )
    check({"code": "ABC-12", "x-count": 3})
    for bad in ({"code": "abc-12"}, {"x-count": "three"}):
        with pytest.raises(Exception, match="does not match|is not of type"):
            check(bad)


def test_every_jsonschema_module_that_searches_is_bounded():
    # jsonschema's keywords search with the module's `re`; a module left on Python's own would hang
    for module in (_keywords, _legacy_keywords, _utils):
        assert type(module.re).__name__ == "_BoundedSearch", module.__name__


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"$ref": "http://example.com/schema"}, "only references within the schema"),
        ({"properties": {"a": {"$ref": "#/definitions/nope"}}}, "which it does not have"),
        ({"$ref": "#"}, "refers to itself without end"),
        (
            {"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"},
            "without end",
        ),
    ],
)
def test_a_reference_the_schema_cannot_follow_is_refused_at_registration(api, schema, reason):
    r = _register(api, "ot.refs", schema)
    assert r.status_code == 422, r.content
    assert r.json()["error"]["code"] == "invalid_input_schema" and reason in r.json()["error"]["message"]


def test_references_within_the_schema_work(api):
    schema = {
        "$defs": {"amount": {"type": "integer", "minimum": 1}, "node": {"$anchor": "item", "type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/amount"}, "b": {"$ref": "#item"}},
    }
    assert _register(api, "ot.local", schema).status_code == 201
    ok = api.post("/api/v1/runs/", {"workflow": "ot.local", "input": {"a": 2, "b": "x"}}, format="json")
    bad = api.post("/api/v1/runs/", {"workflow": "ot.local", "input": {"a": 0}}, format="json")
    assert ok.status_code == 201, ok.content
    assert (
        bad.status_code == 422
        and "schema at a: 0 is less than the minimum of 1" in bad.json()["error"]["message"]
    )


def test_a_start_that_walks_into_a_reference_without_end_is_a_422_not_a_500():
    # one registered before references were checked: a start is refused with the reason
    check = input_validator({"properties": {"a": {"$ref": "#/properties/a"}}})
    with pytest.raises(Exception, match="refers to itself without end"):
        check({"a": 1})
    unresolvable = input_validator({"properties": {"a": {"$ref": "#/definitions/nope"}}})
    with pytest.raises(Exception, match="reference it cannot follow"):
        unresolvable({"a": 1})


def test_an_inputs_patterns_share_one_deadline(monkeypatch):
    # many keys whose searches each stay just under PATTERN_SECONDS end at the input's deadline
    from runs.external import schemas

    check = input_validator({"patternProperties": {"^k": {"type": "integer"}}})
    check({f"k{i}": i for i in range(50)})  # a sane pattern, well within the input's deadline
    monkeypatch.setattr(schemas, "INPUT_SECONDS", 0.0)  # an input whose time is up
    with pytest.raises(schemas.PatternTooSlow, match="together"):
        check({"k1": 1})
