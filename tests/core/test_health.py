"""`/healthz` (liveness) and `/readyz` (database, Redis, migrations): no login, never a 500, and a
readiness that follows the database down and back up in the same process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from core import health
from core.processes import start_python, stop_groups
from tests.processes import wait_until


def test_healthz_answers_without_login_or_dependencies(client, monkeypatch):
    monkeypatch.setattr(health, "check_database", lambda: 1 / 0)  # liveness must not look at it
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_reports_each_check_when_everything_is_up(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "redis": True,
        "migrations": True,
    }
    assert all(check["ms"] >= 0 for check in body["checks"].values())
    assert client.get("/readyz").status_code == 200  # and again: a probe leaves nothing broken


@pytest.mark.django_db
def test_readyz_names_redis_when_it_is_unreachable(client, settings):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["redis"] and "ConnectionError" in body["checks"]["redis"]["reason"]
    assert body["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_readyz_is_not_ready_while_migrations_are_unapplied(client, monkeypatch):
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.migration import Migration

    monkeypatch.setattr(
        MigrationExecutor, "migration_plan", lambda self, targets: [(Migration("0099_future", "runs"), False)]
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["migrations"]
    assert "1 unapplied migration(s): runs.0099_future" in body["checks"]["migrations"]["reason"]


def test_readyz_turns_an_unexpected_error_into_a_503_not_a_500(client, monkeypatch):
    def broken() -> str:
        raise RuntimeError("something nobody expected\nwith a second line")

    monkeypatch.setattr(health, "check_database", broken)
    monkeypatch.setattr(health, "check_redis", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["database", "redis", "migrations"]
    assert body["checks"]["database"]["reason"] == "RuntimeError: something nobody expected"
    assert body["checks"]["migrations"]["reason"].startswith("skipped")
    assert "Traceback" not in response.content.decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


@pytest.mark.slow
def test_readyz_follows_the_database_down_and_back_up_without_a_restart():
    from config.embedded import start_postgres

    pgroot = Path(tempfile.mkdtemp(prefix="keeper-ready-"))
    server, app_url, owner_url = start_postgres(pgroot / "pg")
    web = None
    log = open(pgroot / "web.log", "wb")  # noqa: SIM115
    try:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": app_url,
            "DATABASE_OWNER_URL": owner_url,
            "KEEPER_READY_TIMEOUT": "2",
            "PYTHONUNBUFFERED": "1",
        }
        migrate = start_python(["manage.py", "migrate", "--noinput", "-v", "0"], env=env, log=log)
        assert migrate.wait(timeout=240) == 0, (pgroot / "web.log").read_text()[-3000:]

        port = _free_port()
        env.pop("DATABASE_OWNER_URL")  # the web process serves as the application role only
        web = start_python(
            ["manage.py", "runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"], env=env, log=log
        )
        url = f"http://127.0.0.1:{port}/readyz"
        wait_until(lambda: _get(url)[0] == 200, timeout=60, message="readyz to answer 200")
        pid = web.pid

        server.stop()
        status, body = _get(url)
        assert status == 503, body
        assert body["failing"][0] == "database" and body["checks"]["database"]["reason"]
        assert body["checks"]["redis"]["ok"] is True
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200  # alive, just not ready

        with server._lock:
            server.ensure_postgres_running()
        wait_until(lambda: _get(url)[0] == 200, timeout=30, message="readyz to recover")
        assert web.poll() is None and web.pid == pid  # the same process, never restarted
    finally:
        if web is not None:
            stop_groups([web], grace=5)
        log.close()
        server.stop()
        shutil.rmtree(pgroot, ignore_errors=True)
