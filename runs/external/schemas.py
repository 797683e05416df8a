"""An external workflow's input_schema: checked when it is registered, applied to every start in bounded time.

A tenant writes this schema and Keeper's threads (the web's, and Celery's when a schedule fires) apply
it, so what a valid JSON Schema may make a validator do must stay bounded:
- Registering it costs time in proportion to it, within the limits of schema_index (bytes, nesting,
  schemas within it, references): one walk indexes it, and every reference is then a lookup.
- Checking one input has a deadline (INPUT_SECONDS): every keyword jsonschema evaluates looks at it
  first, so a schema whose work doubles with the input's depth (`anyOf` of two `$ref`s to itself),
  or a registration whose empty input already takes that long, is a 422, not a thread held for hours.
- Patterns: jsonschema matches with Python's `re`, which cannot be stopped inside one search (a
  `pattern` that backtracks without end held a web thread until gunicorn killed its process); its
  keyword modules search through `_BoundedSearch`, the `regex` module with a time limit per search
  (PATTERN_SECONDS) and the input's deadline.
- `uniqueItems` compares items by their JSON identity in a set (jsonschema compares every pair: 20,000
  objects ran past 5 minutes), in the inputs' checks and in the metaschema's check of the schema.
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

import regex
from jsonschema import _keywords, _legacy_keywords, _utils, validators
from jsonschema import exceptions as schema_errors
from referencing.exceptions import Unresolvable

from core.errors import ApplicationError, InvalidInput
from runs.external.schema_index import applies_itself, not_a_schema, schema_index

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
        if getattr(_validating, "metaschema", False):
            # The metaschema's own patterns (an anchor's spelling...): fixed and sane, and a time limit
            # would refuse a sane schema on a busy machine.
            return re.search(pattern, string, flags)
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
    """The input_schema as registered, or InvalidInput with the reason. Every check is bounded: the
    limits of schema_index first (they bound the metaschema's check), then one index its reference
    checks look up, and an empty input's check under the input deadline."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("input_schema must be a JSON Schema object", code="invalid_input_schema")
    # draft 3 and 4 spell $id "id"
    draft = validators.validator_for(value)
    legacy = draft in (validators.Draft3Validator, validators.Draft4Validator)
    index = schema_index(value, ids=("$id", "id") if legacy else ("$id",))
    try:
        _metaschema_check(draft, value)
    except schema_errors.SchemaError as exc:
        raise InvalidInput(
            f"input_schema is not a valid JSON Schema: {exc.message}", code="invalid_input_schema"
        ) from None
    except (*_SCHEMA_FAULTS, re.error, RecursionError) as exc:  # e.g. a pattern's repeat count past C's
        raise InvalidInput(
            f"input_schema is not a valid JSON Schema: {type(exc).__name__}: {str(exc)[:300]}",
            code="invalid_input_schema",
        ) from None
    for _, ref in index.refs:
        if not ref.startswith("#"):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}: only references within the schema (#...) are "
                "followed; Keeper fetches nothing",
                code="invalid_input_schema",
            )
        if not isinstance(index.target(value, ref), dict | bool) or not_a_schema(ref):
            raise InvalidInput(
                f"input_schema refers to {ref[:200]!r}, which is not a schema it has",
                code="invalid_input_schema",
            )
    if index.nested_ids:
        raise InvalidInput(
            f"input_schema has $id {str(index.nested_ids[0])[:200]!r} inside it: a schema within the schema "
            "with an id of its own moves where its references resolve; give the id at the top only",
            code="invalid_input_schema",
        )
    if applies_itself(index):
        raise InvalidInput("input_schema refers to itself without end", code="invalid_input_schema")
    # The first input, whatever it is, shows a reference to itself without end and a schema whose
    # checks alone take too long.
    try:
        _consume(lambda: list(_bounded(draft)(value).iter_errors({})))
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


def _metaschema_check(draft: Any, schema: dict[str, Any]) -> None:
    """jsonschema's check_schema with uniqueItems linear: its own compares every pair (draft 4's
    metaschema asks it of enum: 6,000 objects took 59 s). No deadline: the limits bound it, and a
    busy machine must not refuse a schema it would take when idle."""
    meta = _bounded(validators.validator_for(draft.META_SCHEMA, default=draft))
    checker = meta(schema=draft.META_SCHEMA, format_checker=meta.FORMAT_CHECKER)
    _validating.metaschema = True
    try:
        for error in checker.iter_errors(schema):
            raise schema_errors.SchemaError.create_from(error)
    finally:
        _validating.metaschema = False


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
