"""PgBouncer in front of a PostgreSQL server, for the tests and `make bench`: the pooler deployments put
between Keeper and its database, started from Debian's `pgbouncer` binary in a folder of its own.

Transaction pooling by default, with a small pool handed out round robin: consecutive transactions of
one client then run on different server connections, so anything that relies on a connection's
session state (a `set_config(..., false)`, a prepared statement, a session advisory lock, a cursor
WITH HOLD) shows up at once instead of only under load.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADMIN_USER = "pgbouncer_admin"
# Users that may be asked for when running as root (PgBouncer refuses to run as root): the embedded
# PostgreSQL's own system user first (it can reach that server's socket), then the usual ones.
RUN_AS = ("pgserver", "postgres", "nobody")


@dataclass
class PgBouncer:
    """A running PgBouncer: its unix socket folder and port, the passwords of its users."""

    process: subprocess.Popen[bytes]
    directory: Path
    port: int
    passwords: dict[str, str]
    pool_mode: str
    pool_size: int
    settings: dict[str, str] = field(default_factory=dict)

    def url(self, database_url: str) -> str:
        """The libpq connection string of `database_url`'s role and database, through this pooler."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(database_url)
        user = str(params.get("user") or "")
        if user not in self.passwords:
            raise ValueError(f"PgBouncer was started without the role {user!r}")
        return make_conninfo(
            dbname=str(params.get("dbname") or user),
            user=user,
            password=self.passwords[user],
            host=str(self.directory),
            port=str(self.port),
        )

    def fill(self, database_url: str) -> None:
        """Open the whole pool of `database_url`'s role and database now (one transaction per server
        connection at once), so round robin has every server connection to rotate through from the
        first statement on, not only once PgBouncer's janitor has filled it."""
        import psycopg

        url = self.url(database_url)
        clients = [psycopg.connect(url) for _ in range(self.pool_size)]
        try:
            pids = {conn.execute("SELECT pg_backend_pid()").fetchone()[0] for conn in clients}  # type: ignore[index]
        finally:
            for conn in clients:
                conn.rollback()  # a server connection left inside a transaction would be dropped
                conn.close()
        if len(pids) != self.pool_size:
            raise RuntimeError(f"PgBouncer gave {len(pids)} server connections for {self.pool_size} clients")

    def renew(self, database_url: str) -> None:
        """Close every connection to `database_url`'s database (clients and servers) and open a new
        pool: nothing one test left on a server connection reaches the next."""
        from psycopg.conninfo import conninfo_to_dict

        name = str(conninfo_to_dict(database_url).get("dbname"))
        if not re.fullmatch(r"\w+", name):  # the admin console takes a bare name
            raise ValueError(f"cannot name the database {name!r} to PgBouncer's admin console")
        self.admin(f"KILL {name}")
        self.admin(f"RESUME {name}")
        self.fill(database_url)

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command of PgBouncer's admin console (SHOW POOLS, SHOW SERVERS, ...), as rows of dicts."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(
            dbname="pgbouncer",
            user=ADMIN_USER,
            password=self.passwords[ADMIN_USER],
            host=str(self.directory),
            port=self.port,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,  # the admin console speaks the simple protocol only
            row_factory=dict_row,
        ) as conn:
            cursor = conn.execute(command)
            return cursor.fetchall() if cursor.description is not None else []

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM (PgBouncer closes every connection at once), then SIGKILL if it lingers; the folder
        goes with it. It runs in a session of its own, so nothing else stops it."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


PREFIX = "keeper-pgbouncer-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans() -> list[int]:
    """Stop the PgBouncers whose starting process died without stopping them (a test process killed
    by a timeout or SIGKILL): each folder names its starter; the pid in its pidfile is stopped only if
    that process runs this folder's configuration. Returns the pids stopped."""
    stopped = []
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            starter = int((folder / "starter.pid").read_text())
        except (OSError, ValueError):
            continue
        if _alive(starter):
            continue
        with contextlib.suppress(OSError, ValueError):
            pid = int((folder / "pgbouncer.pid").read_text())
            if str(folder / "pgbouncer.ini") in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGTERM)
                stopped.append(pid)
        shutil.rmtree(folder, ignore_errors=True)
    return stopped


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in RUN_AS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError(f"PgBouncer will not run as root and none of the users {RUN_AS} exists")


def pgbouncer_start(
    *,
    binary: str,
    database_url: str,
    roles: dict[str, str],
    pool_mode: str = "transaction",
    pool_size: int = 3,
    round_robin: bool = True,
    query_wait_timeout: int = 30,
    max_client_conn: int = 500,
) -> PgBouncer:
    """Start PgBouncer on a unix socket in a fresh folder, in front of the server `database_url` names
    (every database of it, under its own name). `roles` maps each role clients may log in as to its
    password on the server ("" where the server trusts the pooler, as the embedded one does: a random
    one is made for the clients then). Clients authenticate with SCRAM against those passwords.

    `query_wait_timeout`: seconds a client's query may wait for a free server connection before
    PgBouncer drops the client (its own default, 120, would hide a stuck pool behind a long wait)."""
    from psycopg.conninfo import conninfo_to_dict

    upstream = conninfo_to_dict(database_url)
    passwords = {role: password or secrets.token_urlsafe(18) for role, password in roles.items()}
    passwords[ADMIN_USER] = secrets.token_urlsafe(18)
    reap_orphans()
    directory = Path(tempfile.mkdtemp(prefix=PREFIX))
    directory.chmod(0o755)  # clients of any user reach the socket; the files inside stay private
    (directory / "starter.pid").write_text(str(os.getpid()))
    port = 6432
    settings = {
        "listen_port": str(port),
        "unix_socket_dir": str(directory),
        "auth_type": "scram-sha-256",
        "auth_file": str(directory / "users.txt"),
        "admin_users": ADMIN_USER,
        "pool_mode": pool_mode,
        "default_pool_size": str(pool_size),
        "min_pool_size": str(pool_size) if round_robin else "0",
        "reserve_pool_size": "0",
        "max_client_conn": str(max_client_conn),
        "server_round_robin": "1" if round_robin else "0",
        # A server connection released longer ago than this is "used": PgBouncer hands out the idle
        # ones first, so after its default 30 s one client kept getting the same one and the round
        # robin stopped.
        "server_check_delay": "3600" if round_robin else "30",
        "query_wait_timeout": str(query_wait_timeout),
        "logfile": str(directory / "pgbouncer.log"),
        "pidfile": str(directory / "pgbouncer.pid"),
        "log_connections": "0",
        "log_disconnections": "0",
    }
    host = str(upstream.get("host") or "/tmp")
    target = f"host={host} port={upstream.get('port') or 5432}"
    (directory / "pgbouncer.ini").write_text(
        f"[databases]\n* = {target}\n\n[pgbouncer]\n"
        + "".join(f"{name} = {value}\n" for name, value in settings.items())
    )
    (directory / "users.txt").write_text(
        "".join(f'"{role}" "{password}"\n' for role, password in passwords.items())
    )
    user = _run_as()
    args = [binary, str(directory / "pgbouncer.ini")]
    if user is not None:
        for path in (directory, directory / "pgbouncer.ini", directory / "users.txt"):
            os.chown(path, user.pw_uid, user.pw_gid)
        args[1:1] = ["-u", user.pw_name]
    for path in (directory / "pgbouncer.ini", directory / "users.txt"):
        path.chmod(0o600)
    with open(directory / "stderr.log", "wb") as output:  # what it says before its log file is open
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    pooler = PgBouncer(process, directory, port, passwords, pool_mode, pool_size, settings)
    _wait_ready(pooler)
    return pooler


def _wait_ready(pooler: PgBouncer, timeout: float = 20.0) -> None:
    socket = pooler.directory / f".s.PGSQL.{pooler.port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pooler.process.poll() is not None:
            said = (pooler.directory / "stderr.log").read_text(errors="replace")
            pooler.stop()
            raise RuntimeError(f"PgBouncer exited at start: {said.strip()[-2000:]}")
        if socket.exists():
            with contextlib.suppress(Exception):
                pooler.admin("SHOW VERSION")
                return
        time.sleep(0.05)
    log = pooler.log()
    pooler.stop()
    raise RuntimeError(f"PgBouncer did not answer within {timeout:.0f} s:\n{log[-2000:]}")
