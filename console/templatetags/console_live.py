"""Live-page keys in templates: `{% load console_live %}`, then `{{ run|run_live_key }}`."""

from __future__ import annotations

from typing import Any

from django import template

from console import live

register = template.Library()


@register.filter
def run_live_key(run: Any) -> str:
    return live.run_live_key(run)


@register.filter
def run_actions_key(run: Any) -> str:
    return live.run_actions_key(run)


@register.simple_tag
def live_poll_seconds() -> int:
    return live.POLL_SECONDS
