"""Real Celery worker and beat processes (and the web server as `make run` starts it) for tests,
started against the test database and reaped.

Each process gets its own session (process group) so SIGKILL takes its pool children with it,
like a machine that lost power.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import redis
from django.conf import settings

from core.processes import (
    celery_beat_args,
    celery_worker_args,
    celery_worker_env,
    current_database_url,
    kill_group,
    start_python,
    stop_groups,
    web_args,
)


def flush_redis() -> None:
    redis.Redis.from_url(settings.REDIS_URL).flushall()


class ProcessGroup:
    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, args: list[str], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        full_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": current_database_url(),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        with open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb") as log:
            proc = start_python(args, env=full_env, log=log)
        self.procs.append(proc)
        return proc

    def worker(
        self, *, concurrency: int = 1, pool: str = "prefork", env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        args = celery_worker_args(f"test{len(self.procs)}", concurrency=concurrency, pool=pool)
        return self._start("worker", args, {**celery_worker_env(pool), **(env or {})})

    def beat(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._start("beat", celery_beat_args(self.log_dir / f"beat-schedule-{len(self.procs)}"), env)

    def script(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._start("script", args, env)

    kill = staticmethod(kill_group)

    def kill_all(self) -> None:
        stop_groups(self.procs, grace=0)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


def wait_until(predicate, *, timeout: float, interval: float = 0.1, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def web_serve(
    log_path: Path,
    args: list[str] | None = None,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """The web server (`args` with PORT in the last one; gunicorn as `make run` starts it by default)
    on `port` (a free one by default) against the test database, its output in `log_path`, `env` added
    to its environment; (process, base URL) once it answers /healthz. Stop it with
    stop_groups([process], grace=5)."""
    port = port or free_port()
    args = args or web_args("127.0.0.1", "PORT")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": current_database_url(),
        "WEB_CONCURRENCY": "1",
        "PYTHONUNBUFFERED": "1",
        "KEEPER_LOG_LEVEL": "INFO",
        **(env or {}),
    }
    env.pop("DATABASE_OWNER_URL", None)
    with open(log_path, "wb") as log:
        web = start_python([*args[:-1], args[-1].replace("PORT", str(port))], env=env, log=log)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _healthy(base), timeout=60, message="the web server to answer")
    return web, base


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2):
            return True
    except OSError:
        return False
