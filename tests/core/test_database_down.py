"""While PostgreSQL is down, every API route answers the JSON error (503, Retry-After) and the console
a readable 503 page, even with DEBUG on: never a 500 or Django's debug page."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from core.processes import start_python, stop_groups
from tests.core.test_health import _free_port
from tests.processes import wait_until


def _fetch(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()
    except OSError:
        return 0, {}, ""


@pytest.mark.slow
def test_api_and_console_answer_503_while_the_database_is_down_even_in_debug():
    from config.embedded import start_postgres

    pgroot = Path(tempfile.mkdtemp(prefix="keeper-down-"))
    server, app_url, owner_url = start_postgres(pgroot / "pg")
    web = None
    log = open(pgroot / "web.log", "wb")  # noqa: SIM115
    try:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DEBUG": "true",
            "DATABASE_URL": app_url,
            "DATABASE_OWNER_URL": owner_url,
            "KEEPER_DATA_DIR": str(pgroot),
            "PYTHONUNBUFFERED": "1",
        }
        migrate = start_python(["manage.py", "migrate", "--noinput", "-v", "0"], env=env, log=log)
        assert migrate.wait(timeout=240) == 0, (pgroot / "web.log").read_text()[-3000:]
        env.pop("DATABASE_OWNER_URL")
        port = _free_port()
        web = start_python(
            ["manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"], env=env, log=log
        )
        base = f"http://127.0.0.1:{port}"
        key = {"Authorization": "Bearer kp_000000000000_" + "x" * 43}  # well-formed, so it is looked up
        wait_until(
            lambda: _fetch(f"{base}/api/v1/runs/", **key)[0] == 401,
            timeout=60,
            message="the API to answer (a bad key: 401)",
        )

        server.stop()
        for path in ("/api/v1/runs/", "/api/v1/approvals/", "/api/v1/memory/items/?subject_id=c-1"):
            status, headers, body = _fetch(base + path, **key)
            assert status == 503, (path, body[:500])
            assert int(headers["Retry-After"]) > 0
            assert json.loads(body)["error"]["code"] == "database_unavailable", path
        status, headers, body = _fetch(f"{base}/runs/", Cookie="sessionid=abcdefghijklmnopqrstuvwxyz012345")
        assert status == 503, body[:500]
        assert int(headers["Retry-After"]) > 0 and headers["Content-Type"].startswith("text/html")
        assert "cannot reach its database" in body
        assert "Traceback" not in body and "OperationalError" not in body

        with server._lock:
            server.ensure_postgres_running()
        wait_until(
            lambda: _fetch(f"{base}/api/v1/runs/", **key)[0] == 401, timeout=30, message="the API to recover"
        )
    finally:
        if web is not None:
            stop_groups([web], grace=5)
        log.close()
        server.stop()
        shutil.rmtree(pgroot, ignore_errors=True)
