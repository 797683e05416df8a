from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from sandbox.models import SandboxOrder
from sandbox.services import order_upsert


@pytest.fixture
def order() -> SandboxOrder:
    """A delivered order of 50.00 EUR (needs a django_db mark on the test)."""
    return order_upsert(
        order_id="ord-1",
        customer_id="cust-1",
        amount_minor=5000,
        currency="EUR",
        status="delivered",
        delivered_at=None,
    ).order


@pytest.fixture
def post_json(client: Client) -> Callable[..., Any]:
    def post(url: str, body: Any, **headers: str) -> Any:
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return client.post(url, data=data, content_type="application/json", headers=headers)

    return post


@pytest.fixture
def refund(post_json: Callable[..., Any]) -> Callable[..., Any]:
    """POST /sandbox/refunds for ord-1 through the test client."""

    def post(
        key: str | None, amount_minor: Any = 1000, currency: Any = "EUR", order_id: Any = "ord-1"
    ) -> Any:
        body = {"order_id": order_id, "amount_minor": amount_minor, "currency": currency}
        return post_json("/sandbox/refunds", body, **({"Idempotency-Key": key} if key is not None else {}))

    return post


def http_json(
    method: str, url: str, body: Any = None, *, headers: dict[str, str] | None = None, timeout: float = 10
) -> tuple[int, dict[str, str], Any]:
    """A real HTTP request; 4xx/5xx come back as (status, headers, body) instead of raising."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())
