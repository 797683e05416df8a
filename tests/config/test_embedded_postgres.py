"""The embedded PostgreSQL of `make run`, manage.py and `make bench` runs with Keeper's shared_buffers
(KEEPER_EMBEDDED_SHARED_BUFFERS): written with ALTER SYSTEM and applied by restarting the server the
process started; one it attached to keeps running and takes it at its next start."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured

from config.embedded import start_postgres
from config.settings.embedded_postgres import default_shared_buffers, embedded_postgres_settings


def _shared_buffers(server, pgdata: Path) -> tuple[str, str]:
    """What the server runs with, and what its next start will use (ALTER SYSTEM's file)."""
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        row = conn.execute("SHOW shared_buffers").fetchone()
    assert row is not None
    [written] = re.findall(r"^shared_buffers = '(.*)'$", (pgdata / "postgresql.auto.conf").read_text(), re.M)
    return str(row[0]), written


def test_the_server_this_process_starts_runs_with_the_setting_and_an_attached_one_takes_it_later():
    folder = Path(tempfile.mkdtemp(prefix="keeper-sb-", dir=tempfile.gettempdir()))
    pgdata = folder / "postgres"
    server, _, _ = start_postgres(pgdata, server_settings={"shared_buffers": "160MB"}, may_restart=True)
    try:
        assert _shared_buffers(server, pgdata) == ("160MB", "160MB")
        pid = server.get_pid()
        server, _, _ = start_postgres(pgdata, server_settings={"shared_buffers": "160MB"}, may_restart=True)
        assert server.get_pid() == pid  # nothing to apply: no restart
        server, _, _ = start_postgres(pgdata, server_settings={"shared_buffers": "192MB"}, may_restart=False)
        assert server.get_pid() == pid  # attached: it keeps running, and takes it at its next start
        assert _shared_buffers(server, pgdata) == ("160MB", "192MB")
        server, _, _ = start_postgres(pgdata, server_settings={"shared_buffers": "192MB"}, may_restart=True)
        assert server.get_pid() != pid and _shared_buffers(server, pgdata) == ("192MB", "192MB")
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_setting_defaults_to_a_quarter_of_memory_within_bounds_and_refuses_a_non_size(monkeypatch):
    monkeypatch.delenv("KEEPER_EMBEDDED_SHARED_BUFFERS", raising=False)
    default = default_shared_buffers()
    assert embedded_postgres_settings() == {"shared_buffers": default}
    assert default.endswith("MB") and 128 <= int(default[:-2]) <= 1024
    monkeypatch.setenv("KEEPER_EMBEDDED_SHARED_BUFFERS", "2GB")
    assert embedded_postgres_settings() == {"shared_buffers": "2GB"}
    monkeypatch.setenv("KEEPER_EMBEDDED_SHARED_BUFFERS", "lots")
    with pytest.raises(ImproperlyConfigured, match="KEEPER_EMBEDDED_SHARED_BUFFERS='lots' is not a size"):
        embedded_postgres_settings()


def test_processes_starting_together_bootstrap_one_at_a_time():
    """Processes started together each run the bootstrap, and two ALTER ROLEs of one role at once
    fail with "tuple concurrently updated" (2 of 12 starts without the lock)."""
    from concurrent.futures import ThreadPoolExecutor

    from config.embedded import APP_ROLE, OWNER_ROLE, bootstrap_database

    folder = Path(tempfile.mkdtemp(prefix="keeper-bs-", dir=tempfile.gettempdir()))
    server, _, _ = start_postgres(folder / "postgres")
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for _ in range(3):
                done = [pool.submit(bootstrap_database, server.get_uri()) for _ in range(4)]
                for future in done:
                    future.result()  # raises what a bootstrap raised
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            roles = conn.execute(
                "SELECT count(*) FROM pg_roles WHERE rolname IN (%s, %s)", [APP_ROLE, OWNER_ROLE]
            )
            assert roles.fetchone() == (2,)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
