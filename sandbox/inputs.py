"""Reading request bodies and parameters into typed values; every problem is a 400/422 with a code."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from django.utils.dateparse import parse_datetime

from sandbox.errors import (
    IdempotencyKeyRequired,
    InvalidAmount,
    InvalidCurrency,
    InvalidField,
    MalformedJson,
    MissingField,
)
from sandbox.models import MAX_ID_LENGTH

MAX_AMOUNT_MINOR = 2**63 - 1  # a PostgreSQL bigint
MAX_TEXT_LENGTH = 2000


def json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body)
    except RequestDataTooBig:
        raise MalformedJson("the body is too large", code="body_too_large") from None
    # RecursionError: deeply nested arrays; ValueError covers bad UTF-8 and over-long integers too.
    except (ValueError, RecursionError):
        raise MalformedJson("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise MalformedJson("the body must be a JSON object")
    return body


def text(value: Any, *, name: str, max_length: int = MAX_TEXT_LENGTH, path_safe: bool = False) -> str:
    """A non-blank string PostgreSQL can store (no NUL, no lone surrogates) and, for ids, usable in a URL."""
    if not isinstance(value, str):
        raise InvalidField(f"{name} must be a string")
    if not value.strip():
        raise InvalidField(f"{name} must not be blank")
    if len(value) > max_length:
        raise InvalidField(f"{name} must be at most {max_length} characters")
    if "\x00" in value:
        raise InvalidField(f"{name} must not contain NUL characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidField(f"{name} is not valid Unicode text") from None
    if path_safe and "/" in value:
        raise InvalidField(f"{name} must not contain '/'")
    return value


def required(body: dict[str, Any], name: str) -> Any:
    if name not in body or body[name] is None:
        raise MissingField(f"{name} is required")
    return body[name]


def order_id(value: Any) -> str:
    return text(value, name="order_id", max_length=MAX_ID_LENGTH, path_safe=True)


def optional_order_id(body: dict[str, Any]) -> str | None:
    value = body.get("order_id")
    return None if value is None else order_id(value)


def amount_minor(body: dict[str, Any]) -> int:
    value = required(body, "amount_minor")
    # bool is an int in Python, but true is not an amount.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidAmount("amount_minor must be an integer number of minor units (cents)")
    if not 0 < value <= MAX_AMOUNT_MINOR:
        raise InvalidAmount(f"amount_minor must be between 1 and {MAX_AMOUNT_MINOR}")
    return value


def currency(body: dict[str, Any]) -> str:
    value = required(body, "currency")
    if not isinstance(value, str):
        raise InvalidCurrency("currency must be a three-letter code such as EUR")
    return text(value, name="currency")


def optional_datetime(body: dict[str, Any], name: str) -> datetime | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidField(f"{name} must be an ISO 8601 datetime or null")
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidField(f"{name} must be an ISO 8601 datetime or null")
    # A datetime without an offset is taken as UTC, the sandbox's only clock.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def optional_count(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**31 - 1:
        raise InvalidField(f"{name} must be a positive integer or null")
    return value


def seconds(body: dict[str, Any], name: str, *, default: float, maximum: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidField(f"{name} must be a number of seconds")
    if not 0 <= value <= maximum:
        raise InvalidField(f"{name} must be between 0 and {maximum}")
    return float(value)


def idempotency_key(value: str | None) -> str:
    if value is None or not value.strip() or len(value) > MAX_ID_LENGTH or "\x00" in value:
        raise IdempotencyKeyRequired(f"an Idempotency-Key of 1 to {MAX_ID_LENGTH} characters is required")
    return value
