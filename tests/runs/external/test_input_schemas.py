"""A tenant's input_schema is applied by Keeper's web threads: a pattern that backtracks without end
or a reference the schema cannot follow is a 4xx with its reason, never a hung thread or a 500
(else a killed gunicorn process, and 500s on every start)."""

from __future__ import annotations

import sys
import time

import pytest
from jsonschema import _keywords, _legacy_keywords, _utils

from runs.external.schemas import PATTERN_SECONDS, input_validator
from runs.kernel.models import AgentRun

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
        ({"properties": {"a": {"$ref": "#/definitions/nope"}}}, "not a schema it has"),
        ({"$ref": "#"}, "refers to itself without end"),
        (
            {"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"},
            "without end",
        ),
        # A property named as a data keyword is a schema all the same (else registration skips it, and
        # the start meets the remote reference)
        ({"properties": {"enum": {"$ref": "http://example.com/schema"}}}, "only references within"),
        ({"properties": {"default": {"$ref": "#/nowhere"}}}, "not a schema it has"),
        ({"$defs": {"examples": {"$ref": "#/$defs/examples"}}, "$ref": "#/$defs/examples"}, "without end"),
        # Each a 500 unchecked: a pointer into data, spelt plainly or percent-encoded, and an $id
        # inside the schema that moves where a reference resolves
        ({"$ref": "#/enum/0", "enum": [{"$ref": "http://example.com/x"}]}, "not a schema it has"),
        ({"$ref": "#/default", "default": {"$ref": "#/missing"}}, "not a schema it has"),
        ({"$ref": "#/%65num/0", "enum": [{"$ref": "http://example.com/x"}]}, "not a schema it has"),
        ({"allOf": [{"$id": "http://evil.example/b.json", "$ref": "#/x"}], "x": {}}, "$id"),
        # Draft 4's "id" below the top, a pointer to a map of names,
        # and loops of references that only an input holding the property would walk
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "definitions": {"s": {"type": "string"}},
                "properties": {"a": {"id": "http://y/", "properties": {"b": {"$ref": "#/definitions/s"}}}},
            },
            "$id",
        ),
        ({"$ref": "#/$defs", "$defs": {"a": {}}}, "not a schema it has"),
        ({"properties": {"a": {"$ref": "#/properties/a"}}}, "without end"),
        (
            {"properties": {"a": {"$ref": "#/properties/b"}, "b": {"allOf": [{"$ref": "#/properties/a"}]}}},
            "without end",
        ),
        (
            {"$defs": {"n": {"$anchor": "n", "not": {"$ref": "#n"}}}, "properties": {"x": {"$ref": "#n"}}},
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
        "$id": "https://example.com/order.json",  # an id at the top is the schema's own
        "$defs": {"amount": {"type": "integer", "minimum": 1}, "node": {"$anchor": "item", "type": "string"}},
        "properties": {
            "a": {"$ref": "#/$defs/amount"},
            "b": {"$ref": "#item"},
            "default": {"type": "string"},  # a property named as a data keyword is a schema
            "c": {"$ref": "#/properties/default"},
            # a tree: a reference to itself one level down the input ends with the input
            "tree": {"$anchor": "tree", "properties": {"kids": {"items": {"$ref": "#tree"}}}},
        },
    }
    assert _register(api, "ot.local", schema).status_code == 201
    tree = {"kids": [{"kids": [{"kids": []}]}, {}]}
    ok = api.post(
        "/api/v1/runs/", {"workflow": "ot.local", "input": {"a": 2, "b": "x", "tree": tree}}, format="json"
    )
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


def test_an_input_has_one_deadline_for_all_its_checks(monkeypatch):
    # many keys whose searches each stay just under PATTERN_SECONDS end at the input's deadline
    from runs.external import schemas

    check = input_validator({"patternProperties": {"^k": {"type": "integer"}}})
    check({f"k{i}": i for i in range(50)})  # a sane pattern, well within the input's deadline
    monkeypatch.setattr(schemas, "INPUT_SECONDS", 0.0)  # an input whose time is up
    with pytest.raises(schemas.SchemaTooSlow, match="took over"):
        check({"k1": 1})


def _nested(depth: int) -> dict:
    data: dict = {"u": 1}
    for _ in range(depth):
        data = {"c": data}
    return data


# Each level asks both branches of the anyOf, each walking the rest: the work doubles with the depth.
DOUBLING = {
    "$defs": {
        "n": {
            "anyOf": [
                {"properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["zz"]},
                {"properties": {"c": {"$ref": "#/$defs/n"}}},
            ]
        }
    },
    "$ref": "#/$defs/n",
}


def test_a_schema_whose_work_doubles_with_the_inputs_depth_is_refused_at_its_deadline(api):
    from runs.external.schemas import INPUT_SECONDS

    assert _register(api, "ot.nest", DOUBLING).status_code == 201
    small = api.post("/api/v1/runs/", {"workflow": "ot.nest", "input": _nested(3)}, format="json")
    assert small.status_code == 201, small.content
    started = time.monotonic()
    deep = api.post("/api/v1/runs/", {"workflow": "ot.nest", "input": _nested(40)}, format="json")
    assert time.monotonic() - started < INPUT_SECONDS + 5  # about 2**40 steps otherwise
    assert deep.status_code == 422 and deep.json()["error"]["code"] == "input_schema_too_slow"


def test_a_schema_too_slow_for_an_empty_input_is_refused_at_registration(api):
    chain = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(40)
    }
    started = time.monotonic()
    r = _register(api, "ot.chain", {"$defs": {**chain, "d40": False}, "$ref": "#/$defs/d0"})
    assert time.monotonic() - started < 10
    assert r.status_code == 422 and "to check even an empty input" in r.json()["error"]["message"]


def _calls(function, *args) -> int:
    """How many Python calls `function(*args)` makes: work counted, not timed (a busy machine does
    not change it)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return count


def test_unique_items_compares_json_values_in_linear_time():
    check = input_validator({"properties": {"a": {"uniqueItems": True}}})
    work = [_calls(check, {"a": [{"k": i, "j": [i, str(i)]} for i in range(n)]}) for n in (1_000, 2_000)]
    assert work[1] < 2.5 * work[0], work  # twice the items, about twice the work (pairs: four times)
    for same in ([{"k": 1, "j": 2}, {"j": 2, "k": 1}], [1, 1.0], [[1, {"a": None}], [1.0, {"a": None}]]):
        with pytest.raises(Exception, match="non-unique"):
            check({"a": same})
    for different in (
        [True, 1],
        [False, 0],
        [None, False],
        ["1", 1],
        [[1, 2], [2, 1]],
        [{"a": 1}, {"a": True}],
    ):
        check({"a": different})


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"$ref": "#/required", "required": ["a"]}, "not a schema it has"),
        (
            {"properties": {"x": {"$ref": "#/properties/y/type"}, "y": {"type": "string"}}},
            "not a schema it has",
        ),
        ({"properties": {"a": {"pattern": "a{4294967296}"}}}, "not a valid JSON Schema"),
    ],
)
def test_a_broken_schema_is_a_422_at_registration_not_a_500(api, schema, reason):
    r = _register(api, "ot.broken", schema)
    assert r.status_code == 422, r.content
    assert r.json()["error"]["code"] == "invalid_input_schema" and reason in r.json()["error"]["message"]


def test_numbers_past_floats_and_data_that_looks_like_a_reference_are_not_500s(api):
    assert _register(api, "ot.num", {"properties": {"n": {"multipleOf": 0.1}}}).status_code == 201
    huge = api.post(
        "/api/v1/runs/", {"workflow": "ot.num", "input": {"n": int("1" + "0" * 4000)}}, format="json"
    )
    assert huge.status_code in (201, 400, 422) and huge.status_code != 500, huge.content
    data = {"properties": {"a": {"enum": [{"$ref": "http://x"}], "default": {"$ref": "#/nowhere"}}}}
    assert _register(api, "ot.data", data).status_code == 201  # data, not references
    assert (
        api.post(
            "/api/v1/runs/", {"workflow": "ot.data", "input": {"a": {"$ref": "http://x"}}}, format="json"
        ).status_code
        == 201
    )


def test_the_same_schema_registered_again_is_the_same_definition_whatever_its_numbers(api):
    """1e308 comes back from jsonb as 1 and 308 zeros: numbers compare by value, so the same definition
    sent again is not a 409, and the first answer is what was stored."""
    schema = {"properties": {"n": {"maximum": 1e308, "minimum": 1e20, "multipleOf": 0.1, "default": True}}}
    first, again = _register(api, "ot.numbers", schema), _register(api, "ot.numbers", schema)
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert first.json()["input_schema"] == again.json()["input_schema"]
    changed = {"properties": {"n": {"maximum": 1e307, "minimum": 1e20, "multipleOf": 0.1, "default": True}}}
    assert _register(api, "ot.numbers", changed).status_code == 409
    as_one = {"properties": {"n": {"maximum": 1e308, "minimum": 1e20, "multipleOf": 0.1, "default": 1}}}
    assert _register(api, "ot.numbers", as_one).status_code == 409  # true is not 1
