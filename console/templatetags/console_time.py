"""Times in templates: `{% load console_time %}`, then `{{ when|ago }}` ("just now", "5 minutes ago")
and `{% local_time when %}` (UTC on the server; static/console/time.js shows it in the reader's
time zone and keeps UTC on hover)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

register = template.Library()

JUST_NOW_SECONDS = 60


@register.filter
def ago(when: datetime | None) -> str:
    """ "just now" under a minute (never "0 minutes ago"), else Django's "5 minutes ago"."""
    if when is None:
        return ""
    if (timezone.now() - when).total_seconds() < JUST_NOW_SECONDS:
        return "just now"
    return f"{timesince(when)} ago"


@register.simple_tag
def local_time(when: datetime | None, empty: str = "—") -> SafeString | str:
    """A <time> whose text is UTC to the second (no microseconds) until the script localizes it."""
    if when is None:
        return empty
    utc = when.astimezone(UTC)
    text = f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    return format_html('<time datetime="{}" data-local title="{}">{}</time>', utc.isoformat(), text, text)
