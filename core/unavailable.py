"""While PostgreSQL cannot be reached: a 503 with Retry-After (the API's JSON error, a console page),
never a 500 or Django's debug page."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
# SQLSTATEs that mean "the server is not there for us right now": connection exceptions (08...),
# shutdown or recovery (57P01-57P03) and no connection slot left (53300).
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached (not a bad query, a deadlock or a timeout)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_UNAVAILABLE_STATES)


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """The API's error body under /api/, otherwise a plain page that needs no database to render."""
    message = "the database is unavailable; try again shortly"
    response: HttpResponse
    if request.path.startswith("/api/"):
        body = {
            "error": {
                "code": "database_unavailable",
                "message": message,
                "details": {"retry_after": RETRY_AFTER_SECONDS},
            }
        }
        response = JsonResponse(body, status=503)
    else:
        page = render_to_string(
            "503.html", {"retry_after": RETRY_AFTER_SECONDS}
        )  # no request: no context processors
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """Turns a view's "cannot reach PostgreSQL" into a 503 (before DEBUG's technical page is drawn)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_unavailable(exception):
            return None
        logger.warning("database unavailable, answered 503: %s", str(exception).splitlines()[0][:200])
        return unavailable_response(request)
