"""Errors of the sandbox; each becomes {"error": {"code", "message"}} with its status."""

from __future__ import annotations

from core.errors import ApplicationError, InvalidInput, NotFound


class MalformedJson(ApplicationError):
    code = "malformed_json"
    http_status = 400


class MissingField(ApplicationError):
    code = "missing_field"
    http_status = 400


class InvalidField(InvalidInput):
    code = "invalid_field"


class IdempotencyKeyRequired(ApplicationError):
    code = "idempotency_key_required"
    http_status = 400


class QueryRequired(ApplicationError):
    code = "query_required"
    http_status = 400


class OrderNotFound(NotFound):
    code = "order_not_found"


class InvalidAmount(InvalidInput):
    code = "invalid_amount"


class InvalidCurrency(InvalidInput):
    code = "invalid_currency"


class CurrencyMismatch(InvalidInput):
    code = "currency_mismatch"


class AmountExceedsRefundable(InvalidInput):
    code = "amount_exceeds_refundable"


class AmountBelowRefunded(InvalidInput):
    code = "amount_below_refunded"


class OrderNotRefundable(InvalidInput):
    code = "order_not_refundable"


class IdempotencyKeyMismatch(InvalidInput):
    """The key was used before for another order, amount or currency."""

    code = "idempotency_key_mismatch"


class UnknownFault(InvalidInput):
    code = "unknown_fault"


class Unavailable(ApplicationError):
    """An injected outage: the request was not served (for POST /refunds: nothing was applied)."""

    code = "unavailable"
    http_status = 503


class DropUnsupported(ApplicationError):
    """drop_after_apply under a server whose client socket the view cannot reach (the refund is applied)."""

    code = "drop_unsupported"
    http_status = 502


class SandboxDisabled(NotFound):
    code = "sandbox_disabled"


class MethodNotAllowed(ApplicationError):
    code = "method_not_allowed"
    http_status = 405
