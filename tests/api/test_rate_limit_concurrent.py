"""The per-key rate limit holds under concurrent clients: counted atomically in Redis, so parallel
requests against a real server cannot all read the same count and all be served."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest

from core.api_auth import ApiKeyRateThrottle, api_key_create

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS, EACH, LIMIT = 8, 5, 20


def _get(url: str, key: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_parallel_clients_get_exactly_the_limit_served(live_server, tenant, monkeypatch) -> None:
    from tests.processes import flush_redis

    flush_redis()
    monkeypatch.setattr(
        ApiKeyRateThrottle, "THROTTLE_RATES", {**ApiKeyRateThrottle.THROTTLE_RATES, "api_key": f"{LIMIT}/min"}
    )
    key = api_key_create(tenant=tenant, name="burst", scope="read").plaintext
    url = f"{live_server.url}/api/v1/approvals/"
    start = threading.Barrier(CLIENTS)
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        start.wait()
        for _ in range(EACH):
            status = _get(url, key)
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    counts = Counter(statuses)
    assert len(statuses) == CLIENTS * EACH
    assert counts == {200: LIMIT, 429: CLIENTS * EACH - LIMIT}, counts
