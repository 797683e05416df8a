"""A system check: every eraser settings.ERASERS names can be imported and built, at start."""

from __future__ import annotations

from typing import Any

from django.core import checks


def erasers_check(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    from erasure.registry import erasers, places

    try:
        erasers.cache_clear()
        places.cache_clear()
        places()
    except Exception as exc:
        return [checks.Error(f"settings.ERASERS cannot be built: {exc}", id="erasure.E001")]
    return []
