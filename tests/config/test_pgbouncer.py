"""The PgBouncer the suite puts in front of its PostgreSQL (config.pgbouncer, tests.pooling): transaction
pooling with a pool of three handed out round robin, so a client's consecutive transactions land on
different server connections; and what KEEPER_DB_POOLER=transaction changes for Django behind it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from config.pgbouncer import pgbouncer_start, reap_orphans
from core.processes import ROOT, current_database_url
from tests import pooling
from tests.pooling import POOL_SIZE, pgbouncer_binary, pooled_connection

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_pids(url: str, statements: int) -> list[int]:
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return [conn.execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(statements)]  # type: ignore[index]


def test_the_pooler_pools_transactions_three_server_connections_of_the_application_role(pgbouncer):
    [pool] = [p for p in pgbouncer.admin("SHOW POOLS") if p["database"] == connection.settings_dict["NAME"]]
    assert pool["pool_mode"] == "transaction" and pool["user"] == connection.settings_dict["USER"]
    config = {row["key"]: row["value"] for row in pgbouncer.admin("SHOW CONFIG")}
    assert config["default_pool_size"] == str(POOL_SIZE) and config["server_round_robin"] == "1"
    # Server connections stay idle (not "used", handed out last) for an hour: with PgBouncer's 30 s,
    # a suite's later tests got one server connection again and again and proved nothing.
    assert config["server_check_delay"] == "3600"
    servers = [
        s for s in pgbouncer.admin("SHOW SERVERS") if s["database"] == connection.settings_dict["NAME"]
    ]
    assert len(servers) == POOL_SIZE
    with psycopg.connect(pgbouncer.url(current_database_url()), prepare_threshold=None) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == "keeper"  # not the owner, no superuser


def test_one_clients_consecutive_transactions_run_on_different_server_connections(pgbouncer):
    pids = _backend_pids(pgbouncer.url(current_database_url()), 2 * POOL_SIZE)
    assert len(set(pids)) == POOL_SIZE, pids  # what makes any reliance on session state show at once


def test_session_state_does_not_follow_a_client_through_the_pooler(pgbouncer):
    """Why a tenant set for the session is unsafe here: the setting stays on one server connection,
    the client's next transactions run elsewhere, and a client that never set it can get it."""
    url = pgbouncer.url(current_database_url())
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as setter:
        setter.execute("SELECT set_config('app.probe', 'left-behind', false)")
        seen = [setter.execute("SELECT current_setting('app.probe', true)").fetchone()[0] for _ in range(3)]
        assert seen.count("left-behind") == 1, seen
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as fresh:
        seen = [fresh.execute("SELECT current_setting('app.probe', true)").fetchone()[0] for _ in range(3)]
    assert "left-behind" in seen
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as cleaner:
        for _ in range(POOL_SIZE):
            cleaner.execute("SELECT set_config('app.probe', '', false)")


def test_behind_the_pooler_a_queryset_iterator_outside_a_transaction_reads_every_row(pgbouncer):
    """Django's cursors WITH HOLD are off (config.env): such a cursor would live on the server
    connection that declared it, and through the pooler its next FETCH runs on another one."""
    expected = ContentType.objects.count()
    with pooled_connection(pgbouncer):
        assert connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] is True
        assert len(list(ContentType.objects.iterator(chunk_size=2))) == expected


def test_the_processes_a_pooled_test_starts_get_the_pooled_url_and_the_pooler_setting(pgbouncer):
    direct = current_database_url()
    with pooled_connection(pgbouncer):
        assert current_database_url() == pgbouncer.url(direct)
        assert os.environ["KEEPER_DB_POOLER"] == "transaction"
        pids = {
            connection.cursor().execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(POOL_SIZE)
        }
        assert len(pids) == POOL_SIZE
    assert current_database_url() == direct and "KEEPER_DB_POOLER" not in os.environ


def test_a_stopped_pooler_leaves_no_process_and_no_folder(pgbouncer):
    pooler = pgbouncer_start(
        binary=pgbouncer_binary(), database_url=current_database_url(), roles={"keeper": ""}, pool_size=1
    )
    pid, folder = pooler.process.pid, pooler.directory
    assert _backend_pids(pooler.url(current_database_url()), 1)
    pooler.stop()
    assert pooler.process.poll() is not None and not folder.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_pooler_whose_starter_was_killed_is_stopped_by_the_next_start(pgbouncer):
    """PgBouncer runs in a session of its own and outlives a test process killed by a timeout or
    SIGKILL; the next start stops it (and only it: the pid must run that folder's configuration)."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from config.pgbouncer import pgbouncer_start;"
            "p = pgbouncer_start(binary=sys.argv[1], database_url=sys.argv[2], roles={'keeper': ''}, pool_size=1);"
            "print(p.directory, p.process.pid, flush=True); time.sleep(120)",
            pgbouncer_binary(),
            current_database_url(),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    folder, pid = starter.stdout.readline().split()
    starter.kill()
    starter.wait(timeout=10)
    os.kill(int(pid), 0)  # still running: an orphan
    assert int(pid) in reap_orphans()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() and not Path(folder).exists()
    assert pgbouncer.process.poll() is None  # the live test process's own pooler is left alone
    assert pgbouncer.admin("SHOW VERSION")


def test_without_pgbouncer_the_pooled_tests_skip_with_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(pooling, "SBIN", "/nonexistent")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install -y pgbouncer"):
        pgbouncer_binary()
    monkeypatch.setenv("CI", "1")  # where .ci/run installs it, a missing one is a failure
    with pytest.raises(pytest.fail.Exception, match="pgbouncer is not installed"):
        pgbouncer_binary()
