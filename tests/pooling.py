"""PgBouncer in transaction mode in front of the test process's PostgreSQL (config.pgbouncer), and a
way to send the test's own connection, and the processes it starts, through it.

`pgbouncer` is one pooler per test process (pool of 3 server connections, handed out round robin);
`through_pgbouncer` routes the `default` database of this process (and so of every worker, beat or
web process a test starts afterwards: they take current_database_url()) through it for one test,
with the settings a transaction pooler needs (KEEPER_DB_POOLER=transaction).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connections

from config.pgbouncer import PgBouncer, pgbouncer_start
from core.processes import current_database_url

# Where Debian installs it; /usr/sbin is not on every user's PATH.
SBIN = "/usr/sbin:/usr/local/sbin"
POOL_SIZE = 3


def pgbouncer_binary() -> str:
    """The pgbouncer program, or the test skips (fails in CI, where .ci/run installs it)."""
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path=SBIN)
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; .ci/run installs it (apt-get install -y pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer); pooled tests skipped")
    return binary


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup, django_db_blocker) -> Iterator[PgBouncer]:
    """PgBouncer 1.18+ in pool_mode=transaction, default_pool_size=3, round robin, in front of this
    process's test database, for the application role. Stopped (SIGTERM, then SIGKILL) at the end."""
    binary = pgbouncer_binary()
    with django_db_blocker.unblock():
        database_url = current_database_url()
    pooler = pgbouncer_start(
        binary=binary,
        database_url=database_url,
        roles={str(connections["default"].settings_dict["USER"]): ""},
        pool_size=POOL_SIZE,
        query_wait_timeout=20,
    )
    try:
        pooler.fill(database_url)
        yield pooler
    finally:
        pooler.stop()


def pooled_env() -> dict[str, str]:
    """What a Keeper process behind a transaction pooler is given besides its DATABASE_URL."""
    return {"KEEPER_DB_POOLER": "transaction"}


@contextmanager
def pooled_connection(pooler: PgBouncer) -> Iterator[None]:
    """The `default` database of this process through `pooler` for the block, with the settings a
    transaction pooler needs; the direct connection again afterwards. The connection settings are
    shared by every thread's connection (a live server's, core.parallel's pool threads'), and the
    processes a test starts inside the block get the pooled URL (current_database_url())."""
    from django.conf import settings
    from psycopg.conninfo import conninfo_to_dict

    db = connections["default"]
    pooled = pooler.url(current_database_url())
    target = conninfo_to_dict(pooled)
    keys = ("HOST", "PORT", "PASSWORD")
    saved = {key: db.settings_dict.get(key) for key in keys}
    saved_settings = {
        name: getattr(settings, name) for name in ("KEEPER_DB_POOLER", "KEEPER_PREPARED_STATEMENTS")
    }
    saved_env = {name: os.environ.get(name) for name in pooled_env()}
    db.close()
    db.settings_dict.update(
        HOST=target["host"],
        PORT=str(target["port"]),
        PASSWORD=target["password"],
    )
    settings.KEEPER_DB_POOLER = "transaction"
    settings.KEEPER_PREPARED_STATEMENTS = False
    os.environ.update(pooled_env())
    try:
        yield
    finally:
        db.close()
        for key, value in saved.items():
            if value is None:
                db.settings_dict.pop(key, None)
            else:
                db.settings_dict[key] = value
        for name, value in saved_settings.items():
            setattr(settings, name, value)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        pooler.renew(pooled)  # what this test left on a server connection stays with this test


@pytest.fixture
def through_pgbouncer(transactional_db, pgbouncer) -> Iterator[PgBouncer]:
    """The whole test through PgBouncer (pooled_connection), on committed data: a test transaction
    around everything would pin one server connection and prove nothing."""
    with pooled_connection(pgbouncer):
        yield pgbouncer


@pytest.fixture(params=["direct", pytest.param("pgbouncer", marks=pytest.mark.django_db(transaction=True))])
def database_path(request) -> str:
    """Runs a test twice: straight on PostgreSQL, then through PgBouncer (through_pgbouncer, on
    committed data). Name it before the fixtures that write (`usefixtures` or first argument)."""
    if request.param == "pgbouncer":
        request.getfixturevalue("through_pgbouncer")
    return str(request.param)
