"""The server-error page with the navigation (Django's default draws it without the request), the
404 that sends a console address with an upper-case id to its page, and /favicon.ico for pages that
do not link the console's icon (the admin, the API docs)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import Resolver404, resolve
from django.utils.encoding import escape_uri_path
from django.views import defaults

from core.api import uuids_lowered

logger = logging.getLogger(__name__)


def server_error(request: HttpRequest) -> HttpResponse:
    """500 with the navigation when the request's user can still be read; else the bare page."""
    try:
        page = render_to_string("500.html", request=request)
    except Exception:  # the failure may be the one that broke the request (the database, a template)
        logger.warning("the 500 page was drawn without the navigation", exc_info=True)
        page = render_to_string("500.html")
    return HttpResponse(page, status=500)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404; but a console address whose id is written in upper case (copied from another system's
    tools or a log) is the same page: GET and HEAD are sent there, as the API serves such ids."""
    lowered = uuids_lowered(request.path_info)
    if request.method in ("GET", "HEAD") and lowered != request.path_info and not lowered.startswith("//"):
        try:
            resolve(lowered)
        except Resolver404:
            pass
        else:
            query = request.META.get("QUERY_STRING", "")
            location = escape_uri_path(request.META.get("SCRIPT_NAME", "") + lowered)
            return HttpResponsePermanentRedirect(location + (f"?{query}" if query else ""))
    return defaults.page_not_found(request, exception)


def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponseRedirect(static("console/favicon.svg"))
