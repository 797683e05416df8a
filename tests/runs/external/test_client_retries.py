"""The client retries 5xx and lost connections with backoff and never retries a 409 (a real HTTP server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from keeper_client import KeeperClient, KeeperConflict


class _Scripted(BaseHTTPRequestHandler):
    answers: list[tuple] = []  # (status, body[, headers])
    seen: list[str] = []
    keys: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append(self.path)
        type(self).keys.append(self.headers.get("Idempotency-Key"))
        status, body, *headers = type(self).answers.pop(0)
        raw = b"" if status == 204 else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers[0] if headers else {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Scripted.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_5xx_is_retried_with_backoff_and_409_is_never_retried(server):
    client = KeeperClient(server, "kp_x", retries=3, backoff=0.01)
    claim = {
        "run_id": "r",
        "workflow": "w",
        "workflow_version": "1",
        "step": "s",
        "state": {},
        "revision": 1,
        "attempt": 1,
        "lease_epoch": 1,
        "lease_token": "t",
        "verified": None,
        "operations_in_doubt": [],
    }
    _Scripted.answers = [(503, {}), (502, {}), (200, claim)]
    got = client.claim(["w"], wait_seconds=0)
    assert got is not None and got.run_id == "r" and len(_Scripted.seen) == 3
    _Scripted.seen = []
    _Scripted.answers = [
        (409, {"error": {"code": "stale_revision", "message": "m", "details": {"current_revision": 4}}})
    ]
    with pytest.raises(KeeperConflict) as conflict:
        client.commit(got, {}, next_step="x")
    assert conflict.value.details == {"current_revision": 4} and len(_Scripted.seen) == 1
    _Scripted.seen = []
    _Scripted.answers = [(500, {})] * 4
    with pytest.raises(Exception) as gave_up:
        client.heartbeat(got)
    assert getattr(gave_up.value, "status", None) == 500 and len(_Scripted.seen) == 4  # 1 + 3 retries


def test_a_refused_connection_is_retried_then_raised():
    client = KeeperClient("http://127.0.0.1:9", "kp_x", retries=2, backoff=0.01, timeout=1)
    with pytest.raises(httpx.TransportError):
        client.claim(["w"], wait_seconds=0)


def test_a_signal_is_retried_with_its_key_after_a_5xx(server):
    """signal() takes the retrying path, not giving up after one 503; its idempotency key makes the
    repeat safe."""
    client = KeeperClient(server, "kp_x", retries=2, backoff=0.01)
    _Scripted.seen, _Scripted.keys = [], []
    _Scripted.answers = [(503, {}), (201, {"seq": 4, "signal": "shipped"})]
    assert client.signal("r", "shipped", {"tracking": "T"}, idempotency_key="k-1") == {
        "seq": 4,
        "signal": "shipped",
    }
    assert _Scripted.seen == ["/api/v1/runs/r/signals/shipped"] * 2 and _Scripted.keys == ["k-1", "k-1"]


def test_a_claim_told_to_come_back_later_waits_as_told_within_its_own_wait(server):
    client = KeeperClient(server, "kp_x", retries=0)
    _Scripted.answers = [
        (204, {}, {"Retry-After": "1"}),
        (204, {}, {"Retry-After": "5"}),
        (204, {}),
    ]
    for wait_seconds, at_least, at_most in ((5, 0.9, 3), (0.3, 0.25, 2), (5, 0, 0.5)):
        started = time.monotonic()
        assert client.claim(["w"], wait_seconds=wait_seconds) is None
        assert at_least <= time.monotonic() - started < at_most, wait_seconds
    assert _Scripted.seen == ["/api/v1/workers/claim"] * 3


def test_a_stopped_worker_does_not_sit_out_a_wait_keeper_asked_for(server):
    """Worker.stop interrupts the Retry-After wait (up to 5 s): the wait ends when the worker's stop
    is set."""
    from keeper_client import Worker

    _Scripted.answers = [(204, {}, {"Retry-After": "5"})] * 3
    worker = Worker(KeeperClient(server, "kp_x", retries=0), {"w": {}}, wait_seconds=20)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not _Scripted.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # inside the five seconds Keeper asked for
    stopped = time.monotonic()
    worker.stop.set()
    thread.join(timeout=6)
    assert not thread.is_alive() and time.monotonic() - stopped < 1.0
    assert _Scripted.seen == ["/api/v1/workers/claim"]


def test_a_retry_waits_what_retry_after_asks_and_a_429_says_how_long(server):
    """The retries wait as long as Keeper's Retry-After says, not their own backoff whatever it says,
    and a 429 tells the worker how long to wait."""
    client = KeeperClient(server, "kp_x", retries=1, backoff=0.01, max_backoff=5)
    _Scripted.answers = [(503, {}, {"Retry-After": "1"}), (204, {})]
    started = time.monotonic()
    assert client.claim(["w"], wait_seconds=0) is None
    assert 0.9 <= time.monotonic() - started < 3
    _Scripted.answers = [
        (429, {"error": {"code": "throttled", "message": "slow down"}}, {"Retry-After": "11"})
    ]
    with pytest.raises(Exception) as raised:
        client.claim(["w"], wait_seconds=0)
    assert (raised.value.status, raised.value.retry_after) == (429, 11.0)


def test_a_stopped_worker_does_not_sit_out_the_retries_of_an_unavailable_keeper(server):
    from keeper_client import Worker

    _Scripted.answers = [(503, {}, {"Retry-After": "5"})] * 10
    client = KeeperClient(server, "kp_x", retries=5, backoff=1, max_backoff=10)
    worker = Worker(client, {"w": {}}, wait_seconds=20)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not _Scripted.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # inside the first wait between tries
    stopped = time.monotonic()
    worker.stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - stopped < 1.0
    assert _Scripted.seen == ["/api/v1/workers/claim"]


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("2", 2.0), (" 2 ", 2.0), ("1.5", 1.5), ("-3", 0.0), ("soon", None), ("", None), ("inf", None)],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(header, seconds):
    from email.utils import format_datetime

    from keeper_client.client import _retry_after

    assert _retry_after(httpx.Response(503, headers={"Retry-After": header})) == seconds
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= _retry_after(httpx.Response(503, headers={"Retry-After": later})) <= 31
