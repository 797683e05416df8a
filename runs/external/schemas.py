"""An external workflow's input_schema: checked when it is registered, applied to every start in bounded time.

A tenant writes this schema and Keeper's web threads apply it, so two things a valid JSON Schema may
hold must not reach a start unchecked (both found from outside):
- a `pattern` that backtracks without end (`^(a+)+$` on "aaaa...!") held a web thread until gunicorn
  killed its process, with the other requests it served. jsonschema matches with Python's `re`, which
  cannot be stopped; its keyword modules search through `_BoundedSearch` instead, the `regex`
  module with a time limit per search and one for the whole input; past either, the start's 422.
- a `$ref` outside the schema (Keeper fetches nothing), to a place it does not have, or to itself
  without end made every start a 500. Registration refuses the first two; a start whose input walks
  into the third is refused with a reason.
"""

from __future__ import annotations

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

from core.errors import InvalidInput

PATTERN_SECONDS = 0.1  # one pattern against one string; a sane pattern takes microseconds
INPUT_SECONDS = 1.0  # all the patterns against one input (many keys, each just under the limit)
_validating = threading.local()  # the deadline of the input being checked in this thread


class PatternTooSlow(InvalidInput):
    code = "input_schema_pattern_too_slow"


class _BoundedSearch:
    """`re` as jsonschema's keyword modules use it (`re.search`), each search bounded in time."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        deadline = getattr(_validating, "deadline", None)
        budget = PATTERN_SECONDS if deadline is None else min(PATTERN_SECONDS, deadline - time.monotonic())
        try:
            if budget <= 0:
                raise TimeoutError
            return regex.search(pattern, string, flags, timeout=budget)
        except TimeoutError:
            raise PatternTooSlow(
                f"the workflow's input_schema pattern {pattern[:200]!r} took over {PATTERN_SECONDS} s on "
                f"this input, or its patterns over {INPUT_SECONDS} s together; the start is refused "
                "(register a version whose patterns do not backtrack)"
            ) from None


# Every module of jsonschema's keywords that searches with `re` (pattern, patternProperties and
# additionalProperties' use of it); tests/runs/external checks that each one is bounded.
for _module in (_keywords, _legacy_keywords, _utils):
    _module.re = _BoundedSearch()


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
    for ref in _refs(value):
        if not ref.startswith("#"):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}: only references within the schema (#...) are "
                "followed; Keeper fetches nothing",
                code="invalid_input_schema",
            )
        if not _resolves(value, ref):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}, which it does not have", code="invalid_input_schema"
            )
    try:  # a reference to itself without end shows on the first input, whatever it is
        for _ in validators.validator_for(value)(value).iter_errors({}):
            pass
    except RecursionError:
        raise InvalidInput("input_schema refers to itself without end", code="invalid_input_schema") from None
    return value


def input_validator(schema: dict[str, Any]) -> Callable[[Any], None]:
    """Checks a start's input against the schema: InvalidInput with where and why."""
    checker = validators.validator_for(schema)(schema)

    def validate(data: Any) -> None:
        _validating.deadline = time.monotonic() + INPUT_SECONDS
        try:
            error = schema_errors.best_match(checker.iter_errors(data))
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
        finally:
            _validating.deadline = None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the input)"
            raise InvalidInput(f"input does not match the workflow's schema at {where}: {error.message}")

    return validate


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    """Whether a reference within the schema names a place it has: a JSON pointer or an anchor."""
    fragment = unquote(ref[1:])
    if not fragment.startswith("/") and fragment:
        return any(anchor == fragment for anchor in _anchors(schema))
    node: Any = schema
    for part in fragment.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _anchors(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$anchor", "$dynamicAnchor") and isinstance(value, str):
                yield value
            else:
                yield from _anchors(value)
    elif isinstance(node, list):
        for item in node:
            yield from _anchors(item)
