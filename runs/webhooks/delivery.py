"""Delivering the outbox: claim due rows (SKIP LOCKED), POST them signed, record each attempt.

A claim moves the row's next attempt past the time one POST can take, and commits, before anything
is sent: no transaction is open while a receiver answers, two workers never send one row at once, and
a worker killed mid-send leaves the row due again once that time has passed (it is sent again; the
receiver deduplicates by the event id).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection

from core.models import Tenant
from core.tenancy import tenant_scope
from runs.webhooks.services import webhook_host_addresses, webhook_host_inward

logger = logging.getLogger(__name__)

USER_AGENT = "Keeper-Webhooks/1"
MAX_BACKOFF = 3600.0


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """The `Keeper-Signature` header: v1=<hex HMAC-SHA256 of "{timestamp}.{body}" keyed by the secret>."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


@dataclass(frozen=True)
class Claimed:
    id: int
    url: str
    secret: str
    event_id: UUID
    event_type: str
    run_id: UUID | None
    tenant_id: UUID
    created_at: datetime
    data: dict[str, Any]
    attempts: int


def webhook_body(claimed: Claimed) -> bytes:
    """The JSON body: the same bytes for every attempt of one delivery (keys sorted, no spaces)."""
    body = {
        "event_id": str(claimed.event_id),
        "type": claimed.event_type,
        "run_id": str(claimed.run_id) if claimed.run_id else None,
        "tenant": str(claimed.tenant_id),
        "occurred_at": claimed.created_at.isoformat(),
        "data": claimed.data,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


# A delivery is found by (id, created_at): created_at is the month's partition, so one partition is read.
_CLAIM = """
WITH due AS MATERIALIZED (
  SELECT id, created_at FROM webhook_deliveries
   WHERE tenant_id = %(tenant)s AND status = 'pending' AND next_attempt_at <= statement_timestamp()
   ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1,
       next_attempt_at = statement_timestamp() + make_interval(secs => %(hold)s)
  FROM due, webhook_subscriptions s
 WHERE d.tenant_id = %(tenant)s AND d.id = due.id AND d.created_at = due.created_at
   AND s.id = d.subscription_id AND s.tenant_id = %(tenant)s
RETURNING d.id, s.url, s.secret, d.event_id, d.event_type, d.run_id, d.tenant_id, d.created_at, d.data,
          d.attempts
"""


def webhook_deliveries_claim(*, tenant_id: UUID, limit: int = 1) -> list[Claimed]:
    """Take up to `limit` due deliveries of the tenant for one attempt each (committed at once); send
    them within the hold (KEEPER_WEBHOOKS_TIMEOUT x 2 + 5 s) or another worker may take them again."""
    hold = settings.KEEPER_WEBHOOKS_TIMEOUT * 2 + 5
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(_CLAIM, {"tenant": tenant_id, "hold": hold, "limit": limit})
        rows = cursor.fetchall()
    return [
        Claimed(
            id=r[0],
            url=r[1],
            secret=r[2],
            event_id=r[3],
            event_type=r[4],
            run_id=r[5],
            tenant_id=r[6],
            created_at=r[7],
            data=json.loads(r[8]) if isinstance(r[8], str | bytes) else r[8],
            attempts=r[9],
        )
        for r in rows
    ]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the receiver's answer (3xx, retried), never followed: it could point inward."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _pinned(cls: type[http.client.HTTPConnection], address: str) -> Any:
    """cls, connecting to `address` whatever the URL's host resolves to (TLS still checks the host)."""

    def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        made = cls(host, **kwargs)

        def create(where: tuple[str, int], *args: Any, **options: Any) -> socket.socket:
            return socket.create_connection((address, where[1]), *args, **options)

        made._create_connection = create  # type: ignore[attr-defined]  # http.client's own hook
        return made

    return connection


class _Pinned(urllib.request.HTTPHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_pinned(http.client.HTTPConnection, self.address), req)


class _PinnedTLS(urllib.request.HTTPSHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_pinned(http.client.HTTPSConnection, self.address), req, context=self._context)  # type: ignore[attr-defined]


def _post(claimed: Claimed) -> tuple[int | None, str]:
    """(the receiver's status code or None, an error text); never raises for the receiver's faults."""
    body = webhook_body(claimed)
    timestamp = str(int(time.time()))
    request = urllib.request.Request(  # noqa: S310 - the scheme was checked when the URL was subscribed
        claimed.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Keeper-Event-Id": str(claimed.event_id),
            "Keeper-Timestamp": timestamp,
            "Keeper-Signature": webhook_signature(secret=claimed.secret, timestamp=timestamp, body=body),
        },
    )
    host = urllib.parse.urlsplit(claimed.url).hostname or ""
    opener = _OPENER
    if not (settings.DEBUG or settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE):
        # Resolved and checked now (a name can point elsewhere than when it was subscribed), and the
        # POST goes to the address checked: a second lookup could answer with an inward one.
        addresses = webhook_host_addresses(host)
        if not addresses:
            return None, f"URLError: {host} does not resolve"
        inward = webhook_host_inward(host, addresses)
        if inward:
            # the rule, not the address: the tenant reads this error
            return None, f"refused: {host} resolves to an address on the deployment's own network"
        opener = urllib.request.build_opener(_NoRedirect, _Pinned(addresses[0]), _PinnedTLS(addresses[0]))
    try:
        with opener.open(request, timeout=settings.KEEPER_WEBHOOKS_TIMEOUT) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"{type(exc).__name__}: {reason}"[:200]


_RECORD = """
UPDATE webhook_deliveries
   SET status = CASE WHEN %(ok)s THEN 'delivered'
                     WHEN attempts >= %(max)s THEN 'failed' ELSE 'pending' END,
       delivered_at = CASE WHEN %(ok)s THEN statement_timestamp() END,
       next_attempt_at = CASE WHEN %(ok)s OR attempts >= %(max)s THEN next_attempt_at
                              ELSE statement_timestamp() + make_interval(secs => %(backoff)s) END,
       last_status_code = %(code)s, last_error = %(error)s,
       history = history || jsonb_build_array(jsonb_build_object(
           'at', statement_timestamp(), 'status_code', %(code)s::int, 'error', %(error)s::text, 'ms', %(ms)s::int))
 WHERE tenant_id = %(tenant)s AND id = %(id)s AND created_at = %(created_at)s AND status = 'pending'
"""


def _backoff(attempts: int) -> float:
    return min(settings.KEEPER_WEBHOOKS_BACKOFF * 2 ** max(attempts - 1, 0), MAX_BACKOFF)


def webhook_attempt(claimed: Claimed) -> bool:
    """POST one claimed delivery and record the attempt; True if the receiver accepted it (2xx)."""
    started = time.monotonic()
    try:
        code, error = _post(claimed)
    except Exception as exc:  # a fault of ours or of one stored URL: recorded, never the sweep's end
        # Its type only: the message may hold the URL, which can carry a person's address.
        logger.error("webhook delivery %s could not be attempted: %s", claimed.id, type(exc).__name__)
        code, error = None, f"{type(exc).__name__}: {exc}"[:200]
    ok = code is not None and 200 <= code < 300
    params: dict[str, Any] = {
        "tenant": claimed.tenant_id,
        "id": claimed.id,
        "created_at": claimed.created_at,
        "ok": ok,
        "max": settings.KEEPER_WEBHOOKS_MAX_ATTEMPTS,
        "backoff": _backoff(claimed.attempts),
        "code": code,
        "error": error,
        "ms": int((time.monotonic() - started) * 1000),
    }
    with tenant_scope(claimed.tenant_id), connection.cursor() as cursor:
        cursor.execute(_RECORD, params)
    return ok


def webhooks_deliver_due(*, limit: int = 20) -> int:
    """One pass over every tenant's due deliveries; the number the receivers accepted."""
    accepted = 0
    for tenant_id in Tenant.objects.values_list("tenant_id", flat=True):
        # One row per claim: a claim holds its row for the time one POST can take, not a batch's.
        for _ in range(limit):
            claimed = webhook_deliveries_claim(tenant_id=tenant_id, limit=1)
            if not claimed:
                break
            accepted += sum(webhook_attempt(each) for each in claimed)
    return accepted
