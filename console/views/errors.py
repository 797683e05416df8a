"""The server-error page with the navigation (Django's default draws it without the request), the
CSRF refusal (audited), and /favicon.ico for pages that do not link the console's icon (the admin,
the API docs)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware import csrf
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.views.csrf import csrf_failure as django_csrf_failure

from console.audit import audit_denied

logger = logging.getLogger(__name__)


def server_error(request: HttpRequest) -> HttpResponse:
    """500 with the navigation when the request's user can still be read; else the bare page."""
    try:
        page = render_to_string("500.html", request=request)
    except Exception:  # the failure may be the one that broke the request (the database, a template)
        logger.warning("the 500 page was drawn without the navigation", exc_info=True)
        page = render_to_string("500.html")
    return HttpResponse(page, status=500)


def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponseRedirect(static("console/favicon.svg"))


# Django's reasons that hold nothing the browser sent; the origin and referer ones quote the header.
_FIXED = {
    csrf.REASON_NO_CSRF_COOKIE,
    csrf.REASON_CSRF_TOKEN_MISSING,
    csrf.REASON_INSECURE_REFERER,
    csrf.REASON_MALFORMED_REFERER,
    csrf.REASON_NO_REFERER,
}


def _fixed_reason(reason: str) -> str:
    """The reason without what the browser sent: the log is append-only, and an Origin header is the
    caller's text."""
    if reason in _FIXED or reason.startswith("CSRF token from"):
        return reason[:200]
    return reason.split(" - ")[0][:80] + " (not a trusted origin)"


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal (403), with an audit entry when a signed-in user's action was refused."""
    try:
        audit_denied(request, why=f"CSRF check failed: {_fixed_reason(reason)}")
    except Exception:  # the refusal is answered whatever happens to its record
        logger.warning("a CSRF refusal was not audited", exc_info=True)
    return django_csrf_failure(request, reason)
