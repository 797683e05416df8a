"""Template filters over console.display: `{% load console_display %}`, then e.g.
`{{ value|pretty_json }}`, `{{ amount|money_major:currency }}`, `{{ digest|short_digest }}`,
`{{ run.run_id|short_id }}`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from console import display
from core.ids import short_id as _short_id

register = template.Library()


@register.filter
def money_major(amount_minor: Any, currency: Any) -> str:
    return display.money_major(amount_minor, currency)


@register.filter
def countdown(expires_at: datetime) -> str:
    return display.countdown(expires_at, timezone.now())


@register.filter
def wake_countdown(wake_at: datetime) -> str:
    return display.wake_countdown(wake_at, timezone.now())


@register.filter
def short_id(value: Any) -> str:
    """A run's id as a list shows it (core.ids.short_id): its last 8 hex digits."""
    return _short_id(value)


@register.filter
def short_digest(digest: Any) -> str:
    return display.short_digest(digest)


@register.filter
def clip(text: Any, limit: int) -> str:
    return display.clip(str(text), int(limit))


@register.filter
def pretty_json(value: Any, limit: int = 6000) -> str:
    return display.pretty_json(value, int(limit))


@register.filter
def readable_json(value: Any) -> str:
    return display.readable_json(value)


@register.filter
def payload_preview(value: Any) -> str:
    return display.payload_preview(value)


@register.filter
def plain_value(value: Any) -> str:
    """A value as a person reads it: text as it is, numbers and booleans as written, the rest short JSON."""
    return display.plain_value(value)


@register.filter
def readable_fields(fields: Any) -> list[tuple[str, str]]:
    """`{% for name, value in record|readable_fields %}`: names in words, money as money, one time format."""
    return display.readable_fields(fields)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    """`{{ mapping|get_item:key }}`: a dict's value for a key the template computed (None if absent)."""
    return mapping.get(key) if isinstance(mapping, dict) else None
