"""Domain errors. The API and the console map each to a 4xx status and a reason code."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """Base of every error a caller can cause and be told about."""

    code = "application_error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class InvalidInput(ApplicationError):
    code = "invalid_input"
    http_status = 422


class NotFound(ApplicationError):
    code = "not_found"
    http_status = 404


class Conflict(ApplicationError):
    code = "conflict"
    http_status = 409
