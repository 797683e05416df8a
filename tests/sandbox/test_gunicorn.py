"""The sandbox's dropped connection under gunicorn, as `make run` serves it: the client gets no answer,
the refund stays applied once, and the server's log shows no traceback for a hang-up it was asked for."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from pathlib import Path

import pytest

from core.processes import stop_groups
from sandbox.models import SandboxRefund
from sandbox.services import fault_add
from tests.processes import web_serve
from tests.sandbox.conftest import http_json

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BODY = {"order_id": "ord-1", "amount_minor": 1000, "currency": "EUR"}


def test_drop_after_apply_under_gunicorn_hangs_up_without_a_traceback(order, tmp_path: Path):
    fault_add(fault="drop_after_apply", order_id="ord-1", remaining=2)
    log_path = tmp_path / "gunicorn.log"
    web, base = web_serve(log_path)
    try:
        url = urllib.parse.urlsplit(base)
        for key in ("k-drop-1", "k-drop-2"):  # twice: the worker thread serves on after a hang-up
            connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10)
            connection.request(
                "POST",
                "/sandbox/refunds",
                body=json.dumps(BODY),
                headers={"Content-Type": "application/json", "Idempotency-Key": key},
            )
            with pytest.raises(
                (http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead)
            ):
                connection.getresponse()
            connection.close()
        status, _, ledger = http_json("GET", f"{base}/sandbox/refunds?order_id=ord-1")
    finally:
        stop_groups([web], grace=5)
    assert status == 200
    assert sorted(row["idempotency_key"] for row in ledger["results"]) == ["k-drop-1", "k-drop-2"]
    assert SandboxRefund.objects.count() == 2
    log = log_path.read_text(errors="replace")
    assert '"POST /sandbox/refunds HTTP/1.1"' in log or "/sandbox/refunds" in log, log[-2000:]
    for alarm in ("Traceback", "Socket error", "Error handling request", "ERROR"):
        assert alarm not in log, log[-3000:]
