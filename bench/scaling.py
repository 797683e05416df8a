"""Figures of Keeper past one process, each beside its baseline in the same invocation, rounds
alternating so drift in the machine hits both sides alike.

pooled_steps: whole runs (as run_e2e's) executed by a worker whose DATABASE_URL goes through PgBouncer
in transaction mode (config.pgbouncer, KEEPER_DB_POOLER=transaction) against the same worker straight
on PostgreSQL: steps/s and their ratio.

scaling: steps/s with 2 worker processes against 1 (each with `make run`'s pool and concurrency), and
API requests/s with 2 web processes (gunicorn's WEB_CONCURRENCY) against 1: the ratios say what a second
process adds on this machine.
"""

from __future__ import annotations

import http.client
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from django.conf import settings

from bench.memory import vacuum
from bench.runs import _countdowns, _countdowns_done, _event_figures
from config.pgbouncer import PgBouncer, pgbouncer_start
from core.api_auth import api_key_create
from core.processes import (
    celery_worker_args,
    celery_worker_env,
    current_database_url,
    start_python,
    stop_groups,
    web_args,
)
from core.tenancy import tenant_bind, tenant_ensure

# Where Debian installs it; /usr/sbin is not on every user's PATH.
SBIN = "/usr/sbin:/usr/local/sbin"
# PgBouncer's own default_pool_size: server connections per database and role.
POOL_SIZE = 20


def _environment(database_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE,
        **(extra or {}),
    }


@contextmanager
def _workers(count: int, env: dict[str, str], log: str) -> Iterator[None]:
    """`count` worker processes with the settings' pool and concurrency; stopped afterwards."""
    pool, concurrency = settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY
    procs = []
    with open(log, "ab") as output:
        for i in range(count):
            args = celery_worker_args(f"scale{i}", concurrency=concurrency, pool=pool)
            procs.append(start_python(args, env={**env, **celery_worker_env(pool)}, log=output))
    try:
        yield
    finally:
        stop_groups(procs, grace=5)


def _batch(tenant_id: UUID, runs: int, n: int, log: str) -> dict[str, Any]:
    """`runs` countdowns started at once; their steps/s from their events."""
    from core.models import Tenant

    tenant = Tenant.objects.get(tenant_id=tenant_id)
    timeout = max(60.0, runs * (n + 2) / 50)  # 50 steps/s at least, on the slowest machine measured
    with tenant_bind(tenant_id):
        return _event_figures(_countdowns_done(_countdowns(tenant, runs, n), timeout=timeout, log=log))


def _steps_per_s(tenant_id: UUID, *, workers: int, env: dict[str, str], runs: int, n: int, log: str) -> float:
    with _workers(workers, env, log):
        _batch(tenant_id, 1, n, log)  # the workers are up
        _batch(tenant_id, runs, n, log)  # every thread has its connection: not measured
        return float(_batch(tenant_id, runs, n, log)["steps_per_s"])


def pgbouncer_missing() -> str | None:
    if shutil.which("pgbouncer") or shutil.which("pgbouncer", path=SBIN):
        return None
    return "pgbouncer is not installed (apt-get install pgbouncer)"


def _pgbouncer(database_url: str) -> PgBouncer:
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path=SBIN)
    assert binary is not None
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(database_url)
    return pgbouncer_start(
        binary=binary,
        database_url=database_url,
        roles={str(params["user"]): str(params.get("password") or "")},
        pool_size=POOL_SIZE,
        round_robin=False,
        query_wait_timeout=120,
    )


def bench_pooled_steps(*, runs: int, n: int, rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "direct_steps_per_s": None,
        "pooled_steps_per_s": None,
        "ratio": None,
        "pool_mode": "transaction",
        "pool_size": POOL_SIZE,
        "runs": runs,
        "steps_per_run": n + 2,
        "rounds": rounds,
        "worker_pool": settings.CELERY_WORKER_POOL,
        "worker_concurrency": settings.CELERY_WORKER_CONCURRENCY,
    }
    why = pgbouncer_missing()
    if why is not None:
        progress(f"pooled_steps: {why}")
        return {**figures, "note": why}
    tenant = tenant_ensure(slug="bench")
    vacuum(["agent_runs", "agent_events"])
    direct = current_database_url()
    pooler = _pgbouncer(direct)
    log = tempfile.NamedTemporaryFile(prefix="keeper-bench-pooled-", suffix=".log", delete=False)  # noqa: SIM115
    direct_rates: list[float] = []
    pooled_rates: list[float] = []
    try:
        pooled_env = _environment(pooler.url(direct), {"KEEPER_DB_POOLER": "transaction"})
        for r in range(rounds):
            direct_rates.append(
                _steps_per_s(
                    tenant.tenant_id, workers=1, env=_environment(direct), runs=runs, n=n, log=log.name
                )
            )
            try:
                pooled_rates.append(
                    _steps_per_s(tenant.tenant_id, workers=1, env=pooled_env, runs=runs, n=n, log=log.name)
                )
            except RuntimeError as exc:  # runs that never finish through the pooler: a finding, not a crash
                note = f"runs through PgBouncer did not complete: {str(exc).split(';')[0][:300]}"
                progress(f"pooled_steps: {note}")
                return {**figures, "direct_steps_per_s": direct_rates[-1], "note": note}
            progress(
                f"pooled_steps round {r + 1}/{rounds}: direct {direct_rates[-1]} steps/s, "
                f"through PgBouncer {pooled_rates[-1]} steps/s"
            )
    finally:
        pooler.stop()
        log.close()
        os.unlink(log.name)
    direct_rate, pooled_rate = statistics.median(direct_rates), statistics.median(pooled_rates)
    return {
        **figures,
        "direct_steps_per_s": direct_rate,
        "pooled_steps_per_s": pooled_rate,
        "ratio": round(pooled_rate / direct_rate, 3) if direct_rate else None,
        "direct_steps_per_s_rounds": direct_rates,
        "pooled_steps_per_s_rounds": pooled_rates,
    }


# --- API requests/s with 1 and 2 web processes ---------------------------------------------------


@contextmanager
def _web(processes: int, env: dict[str, str], log: str) -> Iterator[int]:
    """gunicorn as `make run` starts it, with `processes` worker processes; yields its port."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with open(log, "ab") as output:
        web = start_python(
            web_args("127.0.0.1", port), env={**env, "WEB_CONCURRENCY": str(processes)}, log=output
        )
    try:
        deadline = time.monotonic() + 90
        while not _answers(port):
            if time.monotonic() > deadline or web.poll() is not None:
                raise RuntimeError(f"the web server did not start; its log: {log}")
            time.sleep(0.2)
        yield port
    finally:
        stop_groups([web], grace=5)


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _requests_per_s(port: int, path: str, key: str, *, clients: int, seconds: float) -> tuple[float, int]:
    """`clients` keep-alive connections asking for `path` for `seconds`: answers 200 per second, errors."""
    counts = {"ok": 0, "errors": 0}
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}"}
    start = threading.Barrier(clients + 1)

    def client() -> None:
        ok = errors = 0
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        start.wait()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
                ok, errors = (ok + 1, errors) if response.status == 200 else (ok, errors + 1)
            except (OSError, http.client.HTTPException):
                errors += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()
        with lock:
            counts["ok"] += ok
            counts["errors"] += errors

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.monotonic()
    for thread in threads:
        thread.join()
    return counts["ok"] / (time.monotonic() - t0), counts["errors"]


def bench_scaling(
    *, runs: int, n: int, rounds: int, seconds: float, clients: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    tenant = tenant_ensure(slug="bench")
    vacuum(["agent_runs", "agent_events"])
    env = _environment(
        current_database_url(), {"KEEPER_API_RATE": "100000000/min", "KEEPER_LOG_LEVEL": "WARNING"}
    )
    with tenant_bind(tenant.tenant_id):
        key = api_key_create(tenant=tenant, name="bench-scaling", scope="read").plaintext
        [run_id] = _countdowns(tenant, 1, 1)
    log = tempfile.NamedTemporaryFile(prefix="keeper-bench-scaling-", suffix=".log", delete=False)  # noqa: SIM115
    steps: dict[int, list[float]] = {1: [], 2: []}
    answers: dict[int, list[float]] = {1: [], 2: []}
    errors = 0
    try:
        for r in range(rounds):
            for workers in (1, 2):
                steps[workers].append(
                    _steps_per_s(tenant.tenant_id, workers=workers, env=env, runs=runs, n=n, log=log.name)
                )
            for processes in (1, 2):
                with _web(processes, env, log.name) as port:
                    path = f"/api/v1/runs/{run_id}/"
                    _requests_per_s(port, path, key, clients=clients, seconds=min(2.0, seconds))  # warm
                    rate, failed = _requests_per_s(port, path, key, clients=clients, seconds=seconds)
                answers[processes].append(round(rate, 1))
                errors += failed
            progress(
                f"scaling round {r + 1}/{rounds}: {steps[1][-1]} / {steps[2][-1]} steps/s with 1 / 2 workers, "
                f"{answers[1][-1]} / {answers[2][-1]} requests/s with 1 / 2 web processes"
            )
    finally:
        log.close()
        os.unlink(log.name)
    one_worker, two_workers = statistics.median(steps[1]), statistics.median(steps[2])
    one_web, two_web = statistics.median(answers[1]), statistics.median(answers[2])
    return {
        "steps_per_s_1_worker": one_worker,
        "steps_per_s_2_workers": two_workers,
        "workers_ratio": round(two_workers / one_worker, 3) if one_worker else None,
        "requests_per_s_1_web": one_web,
        "requests_per_s_2_web": two_web,
        "web_ratio": round(two_web / one_web, 3) if one_web else None,
        "request_errors": errors,
        "steps_per_s_rounds": {"1": steps[1], "2": steps[2]},
        "requests_per_s_rounds": {"1": answers[1], "2": answers[2]},
        "rounds": rounds,
        "runs": runs,
        "steps_per_run": n + 2,
        "worker_pool": settings.CELERY_WORKER_POOL,
        "worker_concurrency": settings.CELERY_WORKER_CONCURRENCY,
        "api_clients": clients,
        "api_seconds": seconds,
        "cpu_count": os.cpu_count(),
    }
