"""Pluggable parts, built the way Django builds its own backends: settings.BACKENDS[part] holds a
dotted BACKEND path and its OPTIONS, and backend_build imports the class and calls it with them.

Settings hold dotted strings only, so core imports no app; config.env.backend_choice fills them
from the README's environment variables.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string


def backend_build(part: str) -> Any:
    """A new instance of the part's backend (the caller annotates the part's base class)."""
    try:
        spec = settings.BACKENDS[part]
    except KeyError:
        raise ImproperlyConfigured(f"settings.BACKENDS has no {part!r}") from None
    try:
        backend = import_string(spec["BACKEND"])
    except ImportError as exc:
        raise ImproperlyConfigured(f"settings.BACKENDS[{part!r}]: {exc}") from None
    return backend(**spec.get("OPTIONS", {}))
