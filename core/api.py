"""The one error body of the REST API: {"error": {"code", "message", "details"}}."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError


def error_response(code: str, message: str, http_status: int, details: Any = None) -> Response:
    return Response(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=http_status
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return error_response(exc.code, exc.message, exc.http_status, exc.details)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        return error_response(
            "invalid_input", "the request is not valid", status.HTTP_400_BAD_REQUEST, exc.detail
        )
    code = getattr(exc, "default_code", "error")
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
    return error_response(str(code), str(detail), response.status_code)
