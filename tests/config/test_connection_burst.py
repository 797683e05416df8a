"""A burst of concurrent API requests against the web server as `make run` starts it, on a database
role allowed only a few connections: no 500, only answers or 503 with Retry-After."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from core.api_auth import api_key_create
from core.processes import current_database_url, start_python, stop_groups, web_args
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROLE, ROLE_LIMIT, BURST, CLIENTS = "keeper_burst", 3, 240, 48


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, key: str = "", cookie: str = "") -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if cookie:
        headers["Cookie"] = cookie
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()
    except OSError:
        return 0, {}, b""


def _superuser() -> psycopg.Connection:
    s = connection.settings_dict
    return psycopg.connect(
        host=s["HOST"], port=s["PORT"] or None, dbname=s["NAME"], user="postgres", autocommit=True
    )


@pytest.fixture
def limited_role():
    """A login role with the application role's rights and at most ROLE_LIMIT connections."""
    with _superuser() as su:
        su.execute(
            f"CREATE ROLE {ROLE} LOGIN CONNECTION LIMIT {ROLE_LIMIT} IN ROLE {connection.settings_dict['USER']}"
        )
    try:
        yield ROLE
    finally:
        with _superuser() as su:
            su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [ROLE])
            su.execute(f"DROP ROLE {ROLE}")


def test_a_burst_never_exhausts_connections_into_500s(tenant, limited_role, tmp_path: Path):
    key = api_key_create(tenant=tenant, name="burst", scope="read").plaintext
    port = _free_port()
    database_url = current_database_url().replace(f"user={connection.settings_dict['USER']}", f"user={ROLE}")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url,
        "WEB_CONCURRENCY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DATABASE_OWNER_URL", None)
    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115
    web = start_python(web_args("127.0.0.1", port), env=env, log=log)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(f"{base}/healthz")[0] == 200, timeout=60, message="the web server to answer")
        with ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(lambda _: _get(f"{base}/api/v1/approvals/", key), range(BURST)))
            # The console: a session cookie makes the sign-in check read the database.
            pages = list(
                pool.map(lambda _: _get(f"{base}/", cookie="sessionid=" + "x" * 32), range(BURST // 2))
            )
    finally:
        stop_groups([web], grace=5)
        log.close()
    output = (tmp_path / "web.log").read_text(errors="replace")
    statuses = Counter(status for status, _, _ in answers)
    assert set(statuses) <= {200, 503}, (statuses, output[-3000:])
    assert statuses[200] > 0, statuses
    page_statuses = Counter(status for status, _, _ in pages)
    assert set(page_statuses) <= {302, 503}, page_statuses  # to sign-in, or the busy page
    for status, headers, body in pages:
        if status == 503:
            assert int(headers["Retry-After"]) > 0 and b"Try again in a few seconds" in body
    for status, headers, body in answers:
        if status == 503:
            assert int(headers["Retry-After"]) > 0
            assert json.loads(body)["error"]["code"] == "database_unavailable"
