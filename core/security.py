"""Request guards: control characters in a path answer 404, a database that refuses connections
answers 503 with Retry-After, and every response carries a Content-Security-Policy (the console
loads scripts and styles only from its static files)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.encoding import escape_uri_path

from core.api import uuids_lowered

# No inline script or style anywhere; SVG and data: images for the timeline and the admin's icons.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
# Swagger UI (drf-spectacular's page) starts itself with an inline script and inline styles.
API_DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)
RELAXED_PREFIXES = ("/api/docs/",)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The payments sandbox stands for an external system and answers bad ids itself (404 order_not_found).
UNGUARDED_PREFIXES = ("/sandbox/",)


def _lower_case_address(request: HttpRequest) -> str | None:
    """The address with its UUIDs in lower case, when only that one names a page."""
    path = request.path_info
    lowered = uuids_lowered(path)
    if lowered == path or lowered.startswith("//"):
        return None
    try:
        resolve(path)
        return None  # the path names a page as written (an id that is text, not a UUID)
    except Resolver404:
        pass
    try:
        resolve(lowered)
    except Resolver404:
        return None
    query = request.META.get("QUERY_STRING", "")
    return escape_uri_path(request.META.get("SCRIPT_NAME", "") + lowered) + (f"?{query}" if query else "")


class RequestGuardMiddleware:
    """A path with a control character (NUL included: PostgreSQL refuses it in any text) names
    nothing: 404, in the API's error body under /api/. A NUL in a query value, or in a console form's
    field, is a 400."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        if request.path.startswith(UNGUARDED_PREFIXES):
            pass
        elif CONTROL.search(request.path):
            if api:
                return _error("not_found", "no API endpoint at a path with a control character", 404)
            raise Http404("no page at a path with a control character")
        elif "\x00" in request.META.get("QUERY_STRING", "") or any(
            "\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()
        ):
            if api:
                return _error("invalid_input", "a query parameter contains a NUL character", 400)
            text = "A query parameter contains a NUL character."
            return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
        elif not api and request.method in ("GET", "HEAD") and (moved := _lower_case_address(request)):
            # An id copied in upper case (a log, another system's tools) names the same console page:
            # sent there, with DEBUG on or off (a 404 handler runs only with it off, so `make run`
            # would answer 404). The API serves such ids itself (core.api.api_not_found).
            return HttpResponsePermanentRedirect(moved)
        elif not api and request.method == "POST" and _form_has_nul(request):
            # A NUL in any form (the sign-in form needs no session, the admin's login, a compliance
            # form) would reach PostgreSQL and answer 500.
            text = "A form field contains a NUL character."
            return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            relaxed = request.path.startswith(RELAXED_PREFIXES)
            response["Content-Security-Policy"] = API_DOCS_POLICY if relaxed else CONTENT_SECURITY_POLICY
        return response


def _form_has_nul(request: HttpRequest) -> bool:
    """Whether a console form's fields (a urlencoded or multipart body; the API parses its own) hold a
    NUL; the same parse CSRF protection does next, so the body is read once."""
    content_type = request.META.get("CONTENT_TYPE", "")
    if not content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        return False
    return any("\x00" in key or any("\x00" in v for v in values) for key, values in request.POST.lists())


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "details": {}}}, status=status)


def visible_text(value: str) -> str:
    """The text without the invisible characters at its ends (spaces, control and format characters
    such as U+200B): empty when a "required" note says nothing a person could read (so no refund is
    approved with the note "\x01\x02")."""
    start, end = 0, len(value)
    while start < end and _invisible(value[start]):
        start += 1
    while end > start and _invisible(value[end - 1]):
        end -= 1
    return value[start:end]


# Letters that render as nothing (Unicode's default-ignorable Hangul fillers) and the braille blank.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _invisible(char: str) -> bool:
    return unicodedata.category(char)[0] in "CZ" or char in _BLANK_LETTERS
