"""Real Celery worker and beat processes for tests, started against the test database and reaped.

Each process gets its own session (process group) so SIGKILL takes its pool children with it,
like a machine that lost power.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def test_database_url() -> str:
    s = connection.settings_dict
    host = quote(s["HOST"], safe="/") if s["HOST"] else ""
    port = f":{s['PORT']}" if s["PORT"] and not s["HOST"].startswith("/") else ""
    if s["HOST"].startswith("/"):
        return f"postgresql://{s['USER']}@/{s['NAME']}?host={host}"
    auth = s["USER"] + (f":{quote(s['PASSWORD'])}" if s["PASSWORD"] else "")
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"


def flush_redis() -> None:
    redis.Redis.from_url(settings.REDIS_URL).flushall()


class ProcessGroup:
    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"DJANGO_SETTINGS_MODULE": "config.settings.test", "DATABASE_URL": test_database_url(),
                    "PYTHONUNBUFFERED": "1"})  # fmt: skip
        env.update(extra or {})
        return env

    def _start(self, name: str, args: list[str], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=self._env(env), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def worker(self, *, concurrency: int = 1, pool: str = "prefork", env: dict[str, str] | None = None):
        n = len(self.procs)
        return self._start(
            "worker",
            ["-m", "celery", "-A", "workers", "worker", "-l", "warning", "-P", pool, "-c", str(concurrency),
             "-n", f"test{n}@%h", "--without-heartbeat", "--without-gossip", "--without-mingle"],
            env,
        )  # fmt: skip

    def beat(self, env: dict[str, str] | None = None):
        schedule = self.log_dir / f"beat-schedule-{len(self.procs)}"
        return self._start(
            "beat", ["-m", "celery", "-A", "workers", "beat", "-l", "warning", "-s", str(schedule)], env
        )

    def script(self, args: list[str], env: dict[str, str] | None = None):
        return self._start("script", args, env)

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None or _group_alive(proc.pid):
                self.kill(proc)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(predicate, *, timeout: float, interval: float = 0.1, message: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")
