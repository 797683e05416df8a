"""Child processes in their own process groups: Celery workers and beat for `make run`, chaos and tests.

Each child gets its own session, so signalling the group reaches its pool processes too; SIGKILL
to the group is a machine losing power.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]


def current_database_url() -> str:
    """The libpq connection string of this process's database (the test database in tests).

    Keeper reads DATABASE_URL with libpq's parser, so a `key=value` string is a valid value for
    child processes.
    """
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    s = connection.settings_dict
    parts = {
        "dbname": s["NAME"],
        "user": s["USER"],
        "password": s["PASSWORD"],
        "host": s["HOST"],
        "port": s["PORT"],
    }
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v})


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def group_alive(proc: subprocess.Popen[bytes]) -> bool:
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    signal_group(proc, signal.SIGKILL)
    proc.wait(timeout=10)


def stop_groups(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM every group, wait up to `grace` seconds in all, then SIGKILL what is left."""
    import time

    for proc in procs:
        signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    for proc in procs:  # whatever is left, and any pool child of a parent that already exited
        if proc.poll() is None or group_alive(proc):
            kill_group(proc)


def start_python(
    args: list[str], *, env: dict[str, str] | None = None, log: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT if log else None,
        start_new_session=True,
    )


def web_args(host: str, port: str | int) -> list[str]:
    """The web server as `make run` starts it: gunicorn with config/gunicorn.py, like the image, so
    the threads serving requests (and the database connections they hold) are bounded (processes
    `WEB_CONCURRENCY` x threads each), where runserver starts a thread and a connection per request."""
    return ["-m", "gunicorn", "config.wsgi", "-c", "config/gunicorn.py", "--bind", f"{host}:{port}"]


def celery_worker_args(
    name: str, *, concurrency: int = 1, loglevel: str = "warning", pool: str = "prefork"
) -> list[str]:
    """`solo` runs tasks in the worker process itself, so a crash point kills the worker, not a pool child.

    Celery takes `-P prefork` for its default and lets the configured pool (KEEPER_WORKER_POOL, through
    CELERY_WORKER_POOL) win over it: a caller that wants prefork sets KEEPER_WORKER_POOL=prefork in the
    worker's environment too (celery_worker_env)."""
    return [
        "-m",
        "celery",
        "-A",
        "workers",
        "worker",
        "-l",
        loglevel,
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-n",
        f"{name}@%h",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
    ]


def celery_worker_env(pool: str) -> dict[str, str]:
    """The environment that gives a worker started with celery_worker_args(pool=...) that pool."""
    return {"KEEPER_WORKER_POOL": pool} if pool in ("prefork", "threads") else {}


def celery_beat_args(schedule_file: Path, *, loglevel: str = "warning") -> list[str]:
    return ["-m", "celery", "-A", "workers", "beat", "-l", loglevel, "-s", str(schedule_file)]
