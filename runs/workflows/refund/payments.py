"""HTTP client of the orders + payments API (contract payments.v1) that the refund workflow calls.

It tells apart what the protocol must tell apart: a definite refusal (4xx), an answer that the
request was applied (2xx), and everything after which nobody knows (timeout, dropped connection,
5xx after sending) — that last one is AmbiguousTransportError, which the caller records as
`unknown` and reconciles, never as a failure.
"""

from __future__ import annotations

import http.client
import json
import select
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from django.conf import settings

from runs.authoring import OperationRejected

CONTRACT_VERSION = "payments.v1"


class PaymentsError(Exception):
    pass


class AmbiguousTransportError(PaymentsError):
    """The request may or may not have been applied."""


class PaymentsUnavailable(PaymentsError):
    """A read could not be answered (5xx, timeout, refused): nothing was changed by asking."""


class PaymentRejected(OperationRejected, PaymentsError):
    """A definite no from the remote system; nothing was applied (the operation is `failed`)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(
            f"{status} {code}: {message}", result={"status": status, "code": code, "message": message}
        )
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Lookup:
    authoritative: bool
    applied: bool | None
    refund: dict[str, Any] | None


class PaymentsClient:
    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        url = urlsplit(base_url or settings.KEEPER_SANDBOX_URL)
        self.https = url.scheme == "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout if timeout is not None else settings.KEEPER_PAYMENTS_TIMEOUT

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def _send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> tuple[int, Any]:
        """Send a request and read the JSON answer. Raises OSError / HTTPException on transport trouble."""
        conn = self._connection()
        try:
            payload = json.dumps(body).encode() if body is not None else None
            all_headers = {"Accept": "application/json", **(headers or {})}
            if payload is not None:
                all_headers["Content-Type"] = "application/json"
            conn.request(method, self.prefix + path, body=payload, headers=all_headers)
            if on_sent is not None:
                # Wait until the answer starts to arrive (the remote side has finished), then hand
                # over: a crash point here dies after the effect and before reading the answer.
                select.select([conn.sock], [], [], self.timeout)
                on_sent()
            response = conn.getresponse()
            raw = response.read()
            try:
                data = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                data = {"error": {"code": "not_json", "message": raw[:200].decode(errors="replace")}}
            return response.status, data
        finally:
            conn.close()

    def get_order(self, order_id: str) -> dict[str, Any] | None:
        """The order, or None if the remote system says it does not exist."""
        try:
            status, data = self._send("GET", f"/orders/{quote(order_id, safe='')}")
        except (OSError, http.client.HTTPException) as exc:
            raise PaymentsUnavailable(f"order lookup failed: {exc!r}") from None
        if status == 404:
            return None
        if status != 200:
            raise PaymentsUnavailable(f"order lookup answered {status}: {_error(data)}")
        return dict(data)

    def refund(
        self,
        *,
        order_id: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        on_sent: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        body = {"order_id": order_id, "amount_minor": amount_minor, "currency": currency}
        try:
            status, data = self._send("POST", "/refunds", body, {"Idempotency-Key": idempotency_key}, on_sent)
        except ConnectionRefusedError as exc:  # nothing was sent; still reconciled, to keep one rule
            raise AmbiguousTransportError(f"connection refused: {exc!r}") from None
        except (OSError, http.client.HTTPException) as exc:
            raise AmbiguousTransportError(f"no answer after sending the refund: {exc!r}") from None
        if status in (200, 201) and isinstance(data, dict) and data.get("refund_id"):
            return data
        if 400 <= status < 500 and status not in (408, 409, 429):
            err = (data or {}).get("error", {}) if isinstance(data, dict) else {}
            raise PaymentRejected(status, str(err.get("code", "rejected")), str(err.get("message", "")))
        raise AmbiguousTransportError(f"refund answered {status}: {_error(data)}")

    def lookup_by_idempotency_key(self, key: str) -> Lookup:
        """The authoritative lookup. Unavailable counts as not authoritative: it proves nothing."""
        try:
            status, data = self._send("GET", "/refunds?" + urlencode({"idempotency_key": key}))
        except (TimeoutError, OSError, http.client.HTTPException):
            return Lookup(authoritative=False, applied=None, refund=None)
        if status != 200 or not isinstance(data, dict):
            return Lookup(authoritative=False, applied=None, refund=None)
        authoritative = data.get("authoritative") is True
        applied = data.get("applied")
        return Lookup(
            authoritative=authoritative and isinstance(applied, bool),
            applied=applied if isinstance(applied, bool) else None,
            refund=data.get("refund") if isinstance(data.get("refund"), dict) else None,
        )

    def refunds_for_order(self, order_id: str) -> list[dict[str, Any]]:
        try:
            status, data = self._send("GET", "/refunds?" + urlencode({"order_id": order_id}))
        except (OSError, http.client.HTTPException) as exc:
            raise PaymentsUnavailable(f"ledger lookup failed: {exc!r}") from None
        if status != 200 or not isinstance(data, dict):
            raise PaymentsUnavailable(f"ledger lookup answered {status}: {_error(data)}")
        return list(data.get("results", []))


def _error(data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return f"{data['error'].get('code')}: {data['error'].get('message', '')}"
    return str(data)[:200]
