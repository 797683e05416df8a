"""`make run`: embedded services when unset, migrations, then web, worker and beat as children.

Ctrl-C (or SIGTERM) stops the children (each in its own process group, so their pool processes go
too), then the embedded Redis and PostgreSQL this process started. A worker that dies on its own is
started again (what Celery does for a prefork child, and compose's `restart: unless-stopped` for the
container), up to 3 times a minute; web or beat dying, or a worker dying more often, stops the rest:
a half-running Keeper would only mislead. Runs a dead worker held are taken over once their leases
expire.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_str
from config.settings.data_dir import data_dir
from core.processes import ROOT, start_python, stop_groups, web_args


@dataclass(frozen=True)
class LaunchOptions:
    """What `make run` reads before Django exists (the processes it starts read the settings)."""

    host: str
    port: str
    demo: bool
    data_dir: Path


def launch_options() -> LaunchOptions:
    """KEEPER_HOST, KEEPER_PORT, KEEPER_DEMO and KEEPER_DATA_DIR, parsed like the settings parse theirs."""
    port = env_int("KEEPER_PORT", 8000, minimum=1)
    if port > 65535:
        raise ImproperlyConfigured("KEEPER_PORT must be a TCP port, 1 to 65535")
    return LaunchOptions(
        host=env_str("KEEPER_HOST", "127.0.0.1"),
        port=str(port),
        demo=env_bool("KEEPER_DEMO", True),
        data_dir=data_dir().resolve(),
    )


def _say(line: str) -> None:
    print(f"keeper: {line}", flush=True)


RESTARTED = ("worker",)  # children started again when they die on their own
RESTARTS_PER_MINUTE = 3


class Supervisor:
    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.args: dict[str, list[str]] = {}
        self.restarts: dict[str, list[float]] = {}
        self.stopping = False

    def start(self, name: str, args: list[str]) -> None:
        self.args[name] = args
        self.children[name] = start_python(args)

    def restart(self, name: str) -> bool:
        """Start a dead child again if it may be (a worker, not too often); whether it was."""
        now = time.monotonic()
        recent = [t for t in self.restarts.get(name, []) if now - t < 60]
        if name not in RESTARTED or len(recent) >= RESTARTS_PER_MINUTE:
            return False
        self.restarts[name] = [*recent, now]
        stop_groups([self.children[name]], 0)  # whatever its group left behind
        self.start(name, self.args[name])
        return True

    def dead_child(self) -> tuple[str, int] | None:
        for name, proc in self.children.items():
            code = proc.poll()
            if code is not None:
                return name, code
        return None

    def stop_all(self, grace: float = 10.0) -> None:
        stop_groups(list(self.children.values()), grace)


def _manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True)


def _wait_http(url: str, timeout: float = 60.0) -> bool:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answered
        except OSError:
            time.sleep(0.2)
    return False


def _load_demo(host: str, port: str, *, enabled: bool) -> None:
    """The demo content, once, while only web runs (its refund runs talk to the sandbox web serves)."""
    if not enabled:
        return
    if not _wait_http(f"http://{host}:{port}/sign-in/"):
        _say("web did not answer within 60 s; demo content not loaded")
        return
    try:
        _manage("keeper_demo")
    except subprocess.CalledProcessError:
        _say("the demo content could not be loaded (see above); Keeper runs without it")


def run() -> int:
    os.environ["DJANGO_SETTINGS_MODULE"] = (
        os.environ.get("DJANGO_SETTINGS_MODULE") or "config.settings.local"
    )  # empty: the default
    from config.embedded import ensure_services

    options = launch_options()
    embedded = [name for name in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(name)]
    if embedded:
        _say(
            f"starting embedded {' and '.join(n.split('_')[0].title() for n in embedded)} under {options.data_dir}"
        )
    services = ensure_services(options.data_dir)
    supervisor = Supervisor()

    def request_stop(signum: int, _frame: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    host, port = options.host, options.port
    os.environ.setdefault("KEEPER_SANDBOX_URL", f"http://{host}:{port}/sandbox")
    exit_code = 0
    try:
        _manage("migrate", "--noinput", "-v", "0")
        _manage("keeper_setup")
        supervisor.start("web", web_args(host, port))
        _load_demo(host, port, enabled=options.demo)
        supervisor.start(
            "worker", ["-m", "celery", "-A", "workers", "worker", "-l", "info", "-n", "keeper@%h"]
        )
        supervisor.start(
            "beat",
            [
                "-m",
                "celery",
                "-A",
                "workers",
                "beat",
                "-l",
                "warning",
                "-s",
                str(options.data_dir / "celerybeat-schedule"),
            ],
        )
        _say(
            f"console at http://{host}:{port}/  (admin at /admin/, API at /api/v1/); Ctrl-C stops everything"
        )
        while not supervisor.stopping:
            dead = supervisor.dead_child()
            if dead is not None and supervisor.restart(dead[0]):
                _say(f"{dead[0]} exited with code {dead[1]}; started it again (its runs are taken over)")
            elif dead is not None:
                _say(f"{dead[0]} exited with code {dead[1]}; stopping the rest")
                exit_code = 1
                break
            time.sleep(0.2)
    except subprocess.CalledProcessError as exc:
        _say(f"set-up failed: {' '.join(map(str, exc.cmd[1:]))} exited with {exc.returncode}")
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        _say("stopping web, worker and beat")
        supervisor.stop_all()
        if embedded:
            _say("stopping embedded services")
        services.stop()
        _say("stopped")
    return exit_code


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "run"
    if command != "run":
        print(f"usage: python -m config.launcher run (got {command!r})", file=sys.stderr)
        return 2
    try:
        launch_options()  # a bad setting is said in one line before anything starts
    except ImproperlyConfigured as error:
        print(f"keeper: {error}", file=sys.stderr)
        return 2
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
