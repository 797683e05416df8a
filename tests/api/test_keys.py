"""Per-tenant API keys: hashed at rest, shown once, read or write scope, revocable, rate limited."""

from __future__ import annotations

import hashlib
from io import StringIO
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command

from core.api_auth import ApiKeyRateThrottle, api_key_create
from core.models import ApiKey
from runs.kernel.models import AgentRun
from tests.api.conftest import key_client

pytestmark = pytest.mark.django_db

START = {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 1}}


def _command(*args: str) -> str:
    out = StringIO()
    call_command("api_key", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_the_command_creates_a_key_shown_once_and_stores_only_its_digest(tenant):
    plaintext = _command("create", "--tenant", "acme", "--scope", "write", "--name", "ci")
    key = ApiKey.objects.get()
    _, prefix, secret = plaintext.split("_", 2)
    assert (key.prefix, key.scope, key.name, key.tenant) == (prefix, "write", "ci", tenant)
    assert key.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(ApiKey.objects.values_list())
    listed = _command("list", "--tenant", "acme")
    assert f"kp_{prefix}_" in listed and secret not in listed and "active" in listed
    assert key_client(plaintext).post("/api/v1/runs/", START, format="json").status_code == 201
    assert "revoked" in _command("revoke", prefix)
    refused = key_client(plaintext).get("/api/v1/approvals/")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "authentication_failed"
    assert "revoked" in _command("list")


def test_the_command_refuses_unknown_tenants_scopes_and_keys(tenant):
    with pytest.raises(CommandError):
        _command("create", "--tenant", "nobody", "--scope", "write", "--name", "ci")
    with pytest.raises(CommandError):
        _command("create", "--tenant", "acme", "--scope", "admin", "--name", "ci")
    with pytest.raises(CommandError):
        _command("revoke", "kp_000000000000")
    assert ApiKey.objects.count() == 0


def test_a_read_key_may_only_read(tenant, read_key):
    client = key_client(read_key)
    assert client.get("/api/v1/approvals/").status_code == 200
    refused = client.post("/api/v1/runs/", START, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert AgentRun.objects.count() == 0


def test_a_read_key_may_search_memory_by_post_with_a_query_too_long_for_a_url(tenant, read_key):
    """2,000 Cyrillic letters are 12,000 characters percent-encoded: past any request line a server
    takes, so memory search also takes its fields as a JSON body; a search, so a read key may."""
    client = key_client(read_key)
    query = "посылка пришла разбитой " * 83
    assert len(query) <= 2000 and len(urlencode({"query": query})) > 8190
    found = client.post("/api/v1/memory/search/", {"query": query, "k": 3}, format="json")
    assert found.status_code == 200 and found.json() == {"results": []}
    too_long = client.post("/api/v1/memory/search/", {"query": "x" * 2001}, format="json")
    as_get = client.get("/api/v1/memory/search/", {"query": "x" * 2001})
    assert (too_long.status_code, too_long.json()) == (as_get.status_code, as_get.json())
    assert too_long.status_code == 400 and "query" in too_long.json()["error"]["details"]
    assert client.post("/api/v1/memory/search/", ["not", "an", "object"], format="json").status_code in (
        400,
        422,
    )
    # Each field of its JSON type (a number is not a query; "3" is not a count), as the schema says.
    for body in (
        {"query": 42},
        {"query": "parcel", "k": "3"},
        {"query": "parcel", "k": True},
        {"query": ["a"]},
    ):
        assert client.post("/api/v1/memory/search/", body, format="json").status_code == 400, body
    # Other writes stay refused to a read key.
    assert client.post("/api/v1/memory/items/", {}, format="json").status_code == 403


@pytest.mark.parametrize("header", ["Bearer kp_0123456789ab_" + "x" * 43, "Bearer nonsense", "Bearer a b"])
def test_a_wrong_key_answers_401_and_never_falls_back(tenant, write_key, header):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/v1/runs/", START, format="json")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert AgentRun.objects.count() == 0


def test_a_key_with_a_right_prefix_and_a_wrong_secret_is_refused(tenant):
    created = api_key_create(tenant=tenant, name="ci", scope="write")
    forged = created.plaintext[: -len("x")] + ("y" if created.plaintext[-1] != "y" else "z")
    assert key_client(forged).get("/api/v1/approvals/").status_code == 401


def test_each_key_has_its_own_rate_limit(tenant, write_key, read_key, monkeypatch):
    monkeypatch.setattr(
        ApiKeyRateThrottle, "THROTTLE_RATES", {**ApiKeyRateThrottle.THROTTLE_RATES, "api_key": "3/min"}
    )
    client = key_client(write_key)
    assert [client.get("/api/v1/approvals/").status_code for _ in range(3)] == [200, 200, 200]
    limited = client.get("/api/v1/approvals/")
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "throttled"
    assert int(limited["Retry-After"]) > 0 and limited.json()["error"]["details"]["retry_after"] > 0
    assert key_client(read_key).get("/api/v1/approvals/").status_code == 200


def test_without_redis_the_api_still_answers_and_skips_the_rate_limit(read_key):
    from django.test import override_settings

    from tests.api.conftest import key_client

    dead = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2},
        }
    }
    with override_settings(CACHES=dead):
        response = key_client(read_key).get("/api/v1/approvals/")
    assert response.status_code == 200, response.content


def test_with_another_cache_backend_the_limit_still_counts(tenant, write_key, monkeypatch):
    from django.test import override_settings

    monkeypatch.setattr(
        ApiKeyRateThrottle, "THROTTLE_RATES", {**ApiKeyRateThrottle.THROTTLE_RATES, "api_key": "2/min"}
    )
    local = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=local):
        client = key_client(write_key)
        assert [client.get("/api/v1/approvals/").status_code for _ in range(3)] == [200, 200, 429]


def test_after_the_limit_is_lowered_the_wait_is_until_the_window_holds_fewer(db):
    """With more requests in the window than a lowered limit allows, Retry-After waits until the
    window holds fewer, not 1 s (the oldest leaving), after which the next try is refused again."""
    import time

    from django.core.cache import cache

    from core.api_auth import rate_cache_is_redis, rate_window_take

    if not rate_cache_is_redis():
        pytest.skip("the sliding window lives in Redis (CACHES)")
    key = f"test-window-{time.time_ns()}"
    client = cache._cache.get_client(key, write=True)
    now = time.time()
    client.zadd(
        cache.make_and_validate_key(key), {f"r{i}": now - age for i, age in enumerate((50, 40, 30, 20, 10))}
    )
    served, wait = rate_window_take(key=key, limit=3, window=60)  # 5 in the window, 3 allowed
    assert not served and 29 < wait <= 30.5  # until the third oldest leaves (two remain), not 10 s
    served, wait = rate_window_take(key=key, limit=6, window=60)
    assert served and wait == 0
