"""The sandbox over real HTTP (live_server): slow answers, dropped connections and concurrent requests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from sandbox import transport, views
from sandbox.models import SandboxFault, SandboxRefund
from sandbox.services import fault_add, order_upsert
from tests.sandbox.conftest import http_json

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"order_id": "ord-1", "amount_minor": 1000, "currency": "EUR"}


@pytest.fixture
def seeded() -> None:
    order_upsert(
        order_id="ord-1",
        customer_id="c-1",
        amount_minor=5000,
        currency="EUR",
        status="delivered",
        delivered_at=None,
    )


def _refund_request(live_server, key: str, body: dict = BODY) -> urllib.request.Request:
    return urllib.request.Request(
        f"{live_server.url}/sandbox/refunds",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )


def test_slow_response_times_out_after_the_refund_was_applied(live_server, seeded):
    fault_add(fault="slow_response", order_id="ord-1", remaining=1, delay_s=3)
    with pytest.raises((TimeoutError, urllib.error.URLError)) as raised:
        urllib.request.urlopen(_refund_request(live_server, "k-slow"), timeout=0.5)
    reason = getattr(raised.value, "reason", raised.value)
    assert isinstance(reason, TimeoutError), repr(raised.value)

    assert SandboxRefund.objects.filter(order_id="ord-1").count() == 1
    status, headers, body = http_json(
        "POST", f"{live_server.url}/sandbox/refunds", BODY, headers={"Idempotency-Key": "k-slow"}, timeout=2
    )
    assert (status, headers.get("Idempotent-Replayed")) == (200, "true")
    assert body["refund_id"] == SandboxRefund.objects.get().refund_id
    assert SandboxRefund.objects.count() == 1


def test_drop_after_apply_hangs_up_without_a_response(live_server, seeded):
    fault_add(fault="drop_after_apply", order_id="ord-1", remaining=1)
    url = urllib.parse.urlsplit(live_server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    connection.request(
        "POST",
        "/sandbox/refunds",
        body=json.dumps(BODY),
        headers={"Content-Type": "application/json", "Idempotency-Key": "k-drop"},
    )
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead)):
        connection.getresponse()
    connection.close()

    ledger = http_json("GET", f"{live_server.url}/sandbox/refunds?order_id=ord-1")[2]["results"]
    assert [row["idempotency_key"] for row in ledger] == ["k-drop"]
    status, headers, body = http_json(
        "POST", f"{live_server.url}/sandbox/refunds", BODY, headers={"Idempotency-Key": "k-drop"}
    )
    assert (status, headers.get("Idempotent-Replayed"), body["refund_id"]) == (
        200,
        "true",
        ledger[0]["refund_id"],
    )
    assert SandboxRefund.objects.count() == 1
    assert SandboxFault.objects.get().remaining == 0


def test_drop_after_apply_is_a_connection_error_for_urllib_too(live_server, seeded):
    fault_add(fault="drop_after_apply", remaining=1)
    # urllib raises what http.client raised while reading the answer; an HTTPError would mean a response.
    with pytest.raises((ConnectionError, http.client.IncompleteRead)):
        urllib.request.urlopen(_refund_request(live_server, "k-drop"), timeout=5)
    lookup = http_json("GET", f"{live_server.url}/sandbox/refunds?idempotency_key=k-drop")[2]
    assert (lookup["authoritative"], lookup["applied"]) == (True, True)


def _post_all_at_once(live_server, requests: list[tuple[str, dict]]) -> list[tuple[int, dict]]:
    barrier = threading.Barrier(len(requests))
    answers: list[tuple[int, dict] | None] = [None] * len(requests)

    def post(index: int, key: str, body: dict) -> None:
        barrier.wait()
        status, _, answer = http_json(
            "POST", f"{live_server.url}/sandbox/refunds", body, headers={"Idempotency-Key": key}
        )
        answers[index] = (status, answer)

    threads = [threading.Thread(target=post, args=(n, key, body)) for n, (key, body) in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(answer is not None for answer in answers)
    return [answer for answer in answers if answer is not None]


def test_same_key_posted_eight_times_at_once_applies_once(live_server, seeded):
    answers = _post_all_at_once(live_server, [("k-race", BODY)] * 8)
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * 7 + [201]
    assert len({answer["refund_id"] for _, answer in answers}) == 1
    assert SandboxRefund.objects.count() == 1


def test_same_key_raced_for_two_orders_applies_once(live_server, seeded):
    order_upsert(
        order_id="ord-2",
        customer_id="c-2",
        amount_minor=5000,
        currency="EUR",
        status="delivered",
        delivered_at=None,
    )
    bodies = [{**BODY, "order_id": f"ord-{1 + n % 2}"} for n in range(8)]
    answers = _post_all_at_once(live_server, [("k-race", body) for body in bodies])
    assert SandboxRefund.objects.count() == 1
    winner = SandboxRefund.objects.get()
    for (status, answer), body in zip(answers, bodies, strict=True):
        if body["order_id"] == winner.order_id:
            assert status in (200, 201) and answer["refund_id"] == winner.refund_id
        else:
            assert (status, answer["error"]["code"]) == (422, "idempotency_key_mismatch")


def test_concurrent_keys_cannot_over_refund(live_server, seeded):
    answers = _post_all_at_once(live_server, [(f"k-{n}", {**BODY, "amount_minor": 1500}) for n in range(8)])
    assert sorted(status for status, _ in answers) == [201] * 3 + [422] * 5
    assert {answer["error"]["code"] for status, answer in answers if status == 422} == {
        "amount_exceeds_refundable"
    }
    assert SandboxRefund.objects.count() == 3


def test_concurrent_lookups_consume_each_firing_once(live_server, seeded) -> None:
    fault_add(fault="lookup_unavailable", remaining=3)
    barrier = threading.Barrier(8)
    statuses: list[int] = []

    def look() -> None:
        barrier.wait()
        statuses.append(http_json("GET", f"{live_server.url}/sandbox/refunds?idempotency_key=k-any")[0])

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [200] * 5 + [503] * 3
    assert SandboxFault.objects.get().remaining == 0


def test_wsgi_input_leads_to_the_client_socket(live_server, seeded, monkeypatch) -> None:
    """The chain drop_after_apply relies on, checked on the live server's own request."""
    seen: list[tuple[str, object]] = []

    def spy(request):
        sock = transport.client_socket(request)
        seen.append((type(request.META["wsgi.input"]).__name__, sock))
        return sock

    monkeypatch.setattr(views, "client_socket", spy)
    fault_add(fault="drop_after_apply", remaining=1)
    with pytest.raises(ConnectionError):
        urllib.request.urlopen(_refund_request(live_server, "k-spy"), timeout=5)
    [(stream_type, sock)] = seen
    assert stream_type == "LimitedStream"
    assert isinstance(sock, socket.socket)
