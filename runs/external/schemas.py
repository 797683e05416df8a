"""An external workflow's input_schema: checked when it is registered, applied to every start in bounded time.

A tenant writes this schema and Keeper's threads (the web's, and Celery's when a schedule fires) apply
it, so what a valid JSON Schema may make a validator do must stay bounded (all found from outside):
- Checking one input has a deadline (INPUT_SECONDS): every keyword jsonschema evaluates looks at it
  first, so a schema whose work doubles with the input's depth (`anyOf` of two `$ref`s to itself),
  or a registration whose empty input already takes that long, is a 422, not a thread held for hours.
- Patterns: jsonschema matches with Python's `re`, which cannot be stopped inside one search (a
  `pattern` that backtracks without end held a web thread until gunicorn killed its process); its
  keyword modules search through `_BoundedSearch`, the `regex` module with a time limit per search
  (PATTERN_SECONDS) and the input's deadline.
- `uniqueItems` compares items by their JSON identity in a set (jsonschema compares every pair: 20,000
  objects ran past 5 minutes).
- `$ref`s must stay within the schema (Keeper fetches nothing) and name a schema it has; one to itself
  without end is refused at registration or, reached only through an input, at the start.
- Whatever else a schema registered earlier makes the validator raise is the start's 422 with the
  reason, never a 500.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import regex
from jsonschema import _keywords, _legacy_keywords, _utils, validators
from jsonschema import exceptions as schema_errors
from referencing.exceptions import Unresolvable

from core.errors import ApplicationError, InvalidInput

PATTERN_SECONDS = 0.1  # one pattern against one string; a sane pattern takes microseconds
INPUT_SECONDS = 1.0  # the whole schema against one input
_validating = threading.local()  # the deadline of the input being checked in this thread

# Raised by a broken schema (a `$ref` to a list, a repeat count past C's, a multipleOf past floats).
_SCHEMA_FAULTS = (AttributeError, TypeError, ValueError, OverflowError, KeyError, IndexError, regex.error)


class SchemaTooSlow(InvalidInput):
    code = "input_schema_too_slow"


class PatternTooSlow(SchemaTooSlow):
    code = "input_schema_pattern_too_slow"


def _time_left() -> float | None:
    deadline = getattr(_validating, "deadline", None)
    return None if deadline is None else deadline - time.monotonic()


def _in_time() -> None:
    left = _time_left()
    if left is not None and left <= 0:
        raise SchemaTooSlow(
            f"the workflow's input_schema took over {INPUT_SECONDS} s to check this input; the start is "
            "refused (register a version whose checks do not grow with the input's depth or size)"
        )


class _BoundedSearch:
    """`re` as jsonschema's keyword modules use it (`re.search`), each search bounded in time."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        left = _time_left()
        budget = PATTERN_SECONDS if left is None else min(PATTERN_SECONDS, left)
        try:
            if budget <= 0:
                raise TimeoutError
            return regex.search(pattern, string, flags, timeout=budget)
        except TimeoutError:
            raise PatternTooSlow(
                f"the workflow's input_schema pattern {pattern[:200]!r} took over {PATTERN_SECONDS} s on "
                f"this input, or its checks over {INPUT_SECONDS} s together; the start is refused "
                "(register a version whose patterns do not backtrack)"
            ) from None


# Every module of jsonschema's keywords that searches with `re` (pattern, patternProperties and
# additionalProperties' use of it); tests/runs/external checks that each one is bounded.
for _module in (_keywords, _legacy_keywords, _utils):
    _module.re = _BoundedSearch()


def _timed(keyword: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """The keyword, looking at the input's deadline before it does its work."""

    @functools.wraps(keyword)
    def bounded(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        _in_time()
        yield from keyword(validator, value, instance, schema) or ()

    return bounded


def _identity(value: Any) -> Any:
    """A hashable form under which two JSON values are equal exactly when JSON Schema says they are
    (1 and 1.0 alike, true and 1 not, objects whatever their key order)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_identity(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, _identity(item)) for key, item in value.items()))
    return ("x", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    _in_time()
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for index, item in enumerate(instance):
            key = _identity(item)
            if key in seen:
                yield schema_errors.ValidationError(f"the array has non-unique elements (item {index})")
                return
            seen.add(key)


@functools.cache
def _bounded(base: Any) -> Any:
    """The draft's validator with every keyword timed and uniqueItems linear."""
    keywords = {name: _timed(fn) for name, fn in base.VALIDATORS.items()}
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _unique_items
    return validators.extend(base, keywords)


def schema_checked(value: Any) -> dict[str, Any] | None:
    """The input_schema as registered, or InvalidInput with the reason."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("input_schema must be a JSON Schema object", code="invalid_input_schema")
    try:
        validators.validator_for(value).check_schema(value)
    except schema_errors.SchemaError as exc:
        raise InvalidInput(
            f"input_schema is not a valid JSON Schema: {exc.message}", code="invalid_input_schema"
        ) from None
    except (*_SCHEMA_FAULTS, re.error, RecursionError) as exc:  # e.g. a pattern's repeat count past C's
        raise InvalidInput(
            f"input_schema is not a valid JSON Schema: {type(exc).__name__}: {str(exc)[:300]}",
            code="invalid_input_schema",
        ) from None
    for ref in _refs(value):
        if not ref.startswith("#"):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}: only references within the schema (#...) are "
                "followed; Keeper fetches nothing",
                code="invalid_input_schema",
            )
        if not isinstance(_target(value, ref), dict | bool) or _not_a_schema(ref):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}, which is not a schema it has",
                code="invalid_input_schema",
            )
    # draft 3 and 4 spell $id "id"
    legacy = validators.validator_for(value) in (validators.Draft3Validator, validators.Draft4Validator)
    if nested := next(_nested_ids(value, ids=("$id", "id") if legacy else ("$id",)), None):
        raise InvalidInput(
            f"input_schema has $id {str(nested)[:200]!r} inside it: a schema within the schema with an id of "
            "its own moves where its references resolve; give the id at the top only",
            code="invalid_input_schema",
        )
    if _applies_itself(value):
        raise InvalidInput("input_schema refers to itself without end", code="invalid_input_schema")
    # The first input, whatever it is, shows a reference to itself without end and a schema whose
    # checks alone take too long.
    try:
        _consume(lambda: list(_bounded(validators.validator_for(value))(value).iter_errors({})))
    except SchemaTooSlow:
        raise InvalidInput(
            f"input_schema takes over {INPUT_SECONDS} s to check even an empty input",
            code="invalid_input_schema",
        ) from None
    except RecursionError:
        raise InvalidInput("input_schema refers to itself without end", code="invalid_input_schema") from None
    except Unresolvable as exc:  # whatever the checks above did not foresee
        raise InvalidInput(
            f"input_schema has a reference that cannot be followed: {str(exc)[:300]}",
            code="invalid_input_schema",
        ) from None
    except _SCHEMA_FAULTS as exc:
        raise InvalidInput(
            f"input_schema cannot be applied: {type(exc).__name__}: {str(exc)[:300]}",
            code="invalid_input_schema",
        ) from None
    return value


def _consume(check: Callable[[], Any]) -> Any:
    """Run a check under this thread's input deadline."""
    _validating.deadline = time.monotonic() + INPUT_SECONDS
    try:
        return check()
    finally:
        _validating.deadline = None


def input_validator(schema: dict[str, Any]) -> Callable[[Any], None]:
    """Checks a start's input against the schema: InvalidInput with where and why."""
    checker = _bounded(validators.validator_for(schema))(schema)

    def validate(data: Any) -> None:
        try:
            error = _consume(lambda: schema_errors.best_match(checker.iter_errors(data)))
        except ApplicationError:
            raise
        except RecursionError:
            raise InvalidInput(
                "the workflow's input_schema refers to itself without end for this input",
                code="invalid_input_schema",
            ) from None
        except Unresolvable as exc:  # registered before references were checked
            raise InvalidInput(
                f"the workflow's input_schema has a reference it cannot follow: {exc}",
                code="invalid_input_schema",
            ) from None
        except _SCHEMA_FAULTS as exc:  # registered before schemas were checked this closely
            raise InvalidInput(
                f"the workflow's input_schema cannot be applied to this input: {type(exc).__name__}: "
                f"{str(exc)[:300]}",
                code="invalid_input_schema",
            ) from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the input)"
            raise InvalidInput(f"input does not match the workflow's schema at {where}: {error.message}")

    return validate


# Keywords whose values are data, not schemas: a "$ref" key inside them is not a reference.
_DATA = ("enum", "const", "default", "examples")
# Keywords whose values map names to schemas: a property named "enum" or "$ref" is a name there.
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")


_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def _schema_objects(schema: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every schema object within the schema, by its path: not the values of data keywords, and a
    map of names (properties...) is not one, though each schema it maps is."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}

    def walk(node: Any, path: tuple[str, ...], names: bool = False) -> None:
        if isinstance(node, dict):
            if not names:
                found[path] = node
            for key, value in node.items():
                if names or key not in _DATA:
                    walk(value, (*path, key), names=not names and key in _NAMED)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, (*path, str(index)))

    walk(schema, ())
    return found


def _refs(schema: Any) -> Iterator[str]:
    for node in _schema_objects(schema).values():
        yield from (node[key] for key in _REF_KEYS if isinstance(node.get(key), str))


def _anchors(schema: Any) -> Iterator[tuple[str, tuple[str, ...], dict[str, Any]]]:
    """(anchor, path, schema object) for every $anchor and $dynamicAnchor."""
    for path, node in _schema_objects(schema).items():
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                yield node[key], path, node


def _pointer(ref: str) -> tuple[str, ...] | None:
    """A reference's JSON pointer as its parts (None for an anchor)."""
    fragment = unquote(ref[1:])
    if not fragment.startswith("/") and fragment:
        return None
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in fragment.split("/")[1:])


def _not_a_schema(ref: str) -> bool:
    """Whether a JSON pointer passes through a keyword whose value is data (enum, const, default,
    examples) or ends at a map of names (properties, $defs...), outside a map of names: what it names
    is not a schema, whatever it looks like."""
    parts = _pointer(ref) or ()
    names = False
    for part in parts:
        if not names and part in _DATA:
            return True
        names = not names and part in _NAMED
    return names


def _nested_ids(schema: Any, *, ids: tuple[str, ...] = ("$id",)) -> Iterator[str]:
    """The values of `$id` (or draft 4's `id`) below the schema's top (in schema objects, not in data
    or as property names)."""
    for path, node in _schema_objects(schema).items():
        if path:
            yield from (node[key] for key in ids if isinstance(node.get(key), str))


# Keywords whose subschemas apply to the same value as the schema holding them: a chain of them
# (through references) that comes back to where it started checks one value without end, whatever
# the input (found from outside: {"properties": {"a": {"$ref": "#/properties/a"}}} was registered,
# and every input with "a" was refused). A reference through properties or items goes one level
# down the input, which ends: a tree's schema refers to itself that way.
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE = ("not", "if", "then", "else")


def _applies_itself(schema: dict[str, Any]) -> bool:
    """Whether a chain of in-place keywords and references comes back to a schema it left."""
    nodes = _schema_objects(schema)
    anchors: dict[str, tuple[str, ...]] = {}
    for anchor, path, _ in _anchors(schema):
        anchors.setdefault(anchor, path)

    def edges(path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        node = nodes.get(path)
        if node is None:
            return
        for key in _REF_KEYS:
            ref = node.get(key)
            if isinstance(ref, str) and ref.startswith("#"):
                pointer = _pointer(ref)
                found = anchors.get(unquote(ref[1:])) if pointer is None else pointer
                if found is not None:
                    yield tuple(found)
        for key in _IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                yield from ((*path, key, str(i)) for i in range(len(node[key])))
        yield from ((*path, key) for key in _IN_PLACE if isinstance(node.get(key), dict))

    state: dict[tuple[Any, ...], int] = {}  # 1: on the current chain, 2: done

    def cycles(start: tuple[Any, ...]) -> bool:
        stack = [(start, edges(start))]
        state[start] = 1
        while stack:
            path, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[path] = 2
                stack.pop()
            elif state.get(step) == 1:
                return True
            elif step not in state:
                state[step] = 1
                stack.append((step, edges(step)))
        return False

    return any(cycles(path) for path in list(nodes) if path not in state)


_MISSING = object()


def _target(schema: dict[str, Any], ref: str) -> Any:
    """What a reference within the schema names (a JSON pointer or an anchor), or _MISSING."""
    pointer = _pointer(ref)
    if pointer is None:
        fragment = unquote(ref[1:])
        return next((node for anchor, _, node in _anchors(schema) if anchor == fragment), _MISSING)
    node: Any = schema
    for part in pointer:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node
