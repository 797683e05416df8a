"""The request type of every console view: django-htmx's middleware sets `request.htmx`."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def htmx_target(request: HtmxHttpRequest) -> str:
    """The id of the element htmx asked to swap ("" for a full page)."""
    return str(request.htmx.target or "") if request.htmx else ""
