"""`make run`'s launcher, as a new user runs it: serves, runs work, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from core.processes import ROOT
from tests.processes import wait_until

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except OSError:
        return 0


def _processes_of(data_dir: Path) -> list[str]:
    """Live processes started for this data dir: by command line (postgres) or environment (the rest)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if str(data_dir) in cmdline or proc.environ().get("KEEPER_DATA_DIR") == str(data_dir):
                found.append(cmdline)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _start_countdown(env: dict[str, str]) -> str:
    started = subprocess.run(
        [sys.executable, "manage.py", "start_run", "demo.countdown", "--input", '{"n": 3}'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return started.stdout.split()[0]


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {}


def test_launcher_serves_runs_work_and_stops_everything_on_ctrl_c(tmp_path: Path):
    data_dir = tmp_path / "data"
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "KEEPER_WORKFLOW_MODULES"}
    }
    env.update({"KEEPER_DATA_DIR": str(data_dir), "KEEPER_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    log = open(tmp_path / "launcher.log", "wb")  # noqa: SIM115
    launcher = subprocess.Popen(
        [sys.executable, "-m", "config.launcher", "run"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: _status(f"http://127.0.0.1:{port}/admin/login/") == 200,
            timeout=90,
            message="the console to answer",
        )
        started = [_start_countdown(env)]

        def completed() -> bool:
            # Row-level security: a shell sees the run only as its tenant, found through the narrow function.
            run_id = started[-1]
            check = (
                "from uuid import UUID\nfrom core.tenancy import run_tenant, tenant_bind\n"
                "from runs.kernel.models import AgentRun\n"
                f"with tenant_bind(run_tenant(UUID('{run_id}'))):\n"
                f"    print(AgentRun.objects.get(run_id='{run_id}').status)"
            )
            out = subprocess.run(
                [sys.executable, "manage.py", "shell", "-c", check],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            return out.stdout.strip().endswith("completed")

        wait_until(completed, timeout=60, interval=1, message="the run to complete under make run")
        # A worker that dies on its own (SIGKILL: out of memory, a crash) is started again, and work goes on.
        workers = [
            p
            for p in psutil.process_iter(["cmdline"])
            if "celery" in " ".join(p.info["cmdline"] or [])
            and " worker " in " ".join(p.info["cmdline"] or [])
            and _environ(p).get("KEEPER_DATA_DIR") == str(data_dir)
        ]
        assert workers
        for worker in workers:
            worker.kill()
        wait_until(
            lambda: "worker exited with code -9; started it again" in (tmp_path / "launcher.log").read_text(),
            timeout=30,
            message="the launcher to start the worker again",
        )
        started.append(_start_countdown(env))
        wait_until(completed, timeout=60, interval=1, message="a run to complete after the worker was killed")
        assert (data_dir / "admin-password.txt").stat().st_mode & 0o077 == 0
        assert (data_dir / "demo-credentials.txt").stat().st_mode & 0o077 == 0  # the demo loaded once
        assert "awaiting_approval" in (data_dir / "demo-loaded.txt").read_text()
        running = " ".join(_processes_of(data_dir))
        assert all(name in running for name in ("postgres", "gunicorn", "worker", "beat")), running
        registry = json.loads((data_dir / "redis" / "redis.db.settings").read_text())
        redis_pid = int(Path(registry["pidfile"]).read_text())
        assert _alive(redis_pid)
    finally:
        launcher.send_signal(signal.SIGINT)
        code = launcher.wait(timeout=60)
    output = (tmp_path / "launcher.log").read_text()
    assert code == 0, output
    assert "keeper: stopped" in output
    assert "demo sign-ins (development only" in output and "acme-support" in output
    time.sleep(0.5)
    assert _processes_of(data_dir) == []
    assert not _alive(redis_pid)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("KEEPER_PORT", "eighty", "KEEPER_PORT"),
        ("KEEPER_PORT", "70000", "KEEPER_PORT must be a TCP port"),
        ("KEEPER_DEMO", "perhaps", "KEEPER_DEMO"),
    ],
)
def test_a_bad_launch_setting_is_one_line_and_starts_nothing(
    tmp_path: Path, name: str, value: str, said: str
):
    """`make run` with a bad KEEPER_PORT or KEEPER_DEMO says which setting is wrong in one line (no
    traceback), exits 2, and starts no service."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATABASE_OWNER_URL")
    }
    env.update({name: value, "KEEPER_DATA_DIR": str(tmp_path / "data")})
    done = subprocess.run(
        [sys.executable, "-m", "config.launcher", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr + done.stdout
    assert done.stderr.strip().count("\n") == 0
    assert not (tmp_path / "data").exists() and _processes_of(tmp_path / "data") == []
