"""The chaos check: refund runs through real worker processes that are killed at every crash point.

For each scenario it seeds orders in the payments sandbox, starts real Celery workers (solo pool,
so a crash point kills the worker process itself) and beat, starts refund runs, restarts workers
as they die, and then counts from the sandbox ledger: at most one refund per order, no lost runs.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db.models import Count

from core.processes import (
    celery_beat_args,
    celery_worker_args,
    current_database_url,
    kill_group,
    start_python,
    stop_groups,
)
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation

CRASH_POINTS = (
    "before_refund_call",
    "after_refund_request_sent",
    "after_refund_response",
    "after_checkpoint",
)


KILL_MIN_AGE = 2.0  # seconds a worker is up before a random SIGKILL may pick it (it has booted)


@dataclass(frozen=True)
class Scenario:
    name: str
    crash_at: str | None = None
    fault: str | None = None
    kill_interval: float = 0.0  # mean seconds between random SIGKILLs; 0 = none
    expect: str = "completed"  # or "reconciliation_required"


def scenarios(points: list[str] | None = None) -> list[Scenario]:
    chosen = [Scenario(p, crash_at=p) for p in (points or CRASH_POINTS)]
    chosen.append(Scenario("random_sigkill", kill_interval=0.3))
    chosen.append(
        Scenario(
            "nonauthoritative_lookup",
            crash_at="after_refund_request_sent",
            fault="lookup_non_authoritative",
            expect="reconciliation_required",
        )
    )
    return chosen


class SandboxAdmin:
    """The few sandbox calls chaos needs, over HTTP like any client of an external system."""

    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def add_order(self, order_id: str) -> None:
        delivered = (datetime.now(UTC) - timedelta(days=2)).isoformat()
        self._call(
            "POST",
            "/orders",
            {
                "order_id": order_id,
                "customer_id": "cust-chaos",
                "amount_minor": 4999,
                "currency": "EUR",
                "status": "delivered",
                "delivered_at": delivered,
            },
        )

    def add_fault(self, fault: str) -> None:
        self._call("POST", "/faults", {"fault": fault, "order_id": None, "remaining": None})

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def refunds(self, order_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/refunds?order_id={order_id}")["results"])


def serve_sandbox_in_thread() -> tuple[str, Callable[[], None]]:
    """Serve Keeper's WSGI app (and so /sandbox/) on a free local port; return its URL and a stop."""
    from django.core.servers.basehttp import (
        ThreadedWSGIServer,
        WSGIRequestHandler,
        get_internal_wsgi_application,
    )

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=True)
    server.set_app(get_internal_wsgi_application())
    thread = threading.Thread(target=server.serve_forever, name="chaos-sandbox", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}/sandbox", stop


@dataclass
class _Crashes:
    at: list[float] = field(default_factory=list)
    # (run id, kill time) for the runs the killed worker held at that moment
    hit: list[tuple[str, float]] = field(default_factory=list)


def run_scenario(
    scenario: Scenario,
    *,
    runs: int,
    sandbox_url: str,
    workers: int,
    timeout: float,
    seed: int,
    progress: Callable[[str, int, int, int], None],
) -> dict[str, Any]:
    tenant = tenant_ensure(slug="chaos", name="Chaos check")
    with tenant_bind(tenant.tenant_id):  # row-level security: the check watches its own tenant's runs
        return _run_scenario(
            scenario,
            tenant,
            runs=runs,
            sandbox_url=sandbox_url,
            workers=workers,
            timeout=timeout,
            seed=seed,
            progress=progress,
        )


def _run_scenario(
    scenario: Scenario,
    tenant: Any,
    *,
    runs: int,
    sandbox_url: str,
    workers: int,
    timeout: float,
    seed: int,
    progress: Callable[[str, int, int, int], None],
) -> dict[str, Any]:
    rng = random.Random(seed)
    admin = SandboxAdmin(sandbox_url)
    admin.clear_faults()
    if scenario.fault:
        admin.add_fault(scenario.fault)
    batch = uuid.uuid4().hex[:8]
    order_ids = [f"chaos-{scenario.name}-{batch}-{i}" for i in range(runs)]
    for order_id in order_ids:
        admin.add_order(order_id)
    crash_dir = Path(tempfile.mkdtemp(prefix="keeper-chaos-"))
    env = {
        **os.environ,
        "DATABASE_URL": current_database_url(),
        "KEEPER_SANDBOX_URL": sandbox_url,
        "KEEPER_CRASH_AT": scenario.crash_at or "",
        "KEEPER_CRASH_ONCE_DIR": str(crash_dir),
        "KEEPER_CRASH_STEP": "refund",
        "KEEPER_REFUND_AUTO_APPROVE_MINOR": str(10**9),
        "KEEPER_LEASE_TTL": "2",
        "KEEPER_RETRY_BACKOFF": "0.2",
        "KEEPER_PAYMENTS_TIMEOUT": "3",
        "KEEPER_REDISPATCH_INTERVAL": "0.5",
        "KEEPER_REDISPATCH_GRACE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log = open(crash_dir / "processes.log", "ab")  # noqa: SIM115 - closed below, shared by all children

    def start_worker(i: int) -> Any:
        return start_python(
            celery_worker_args(f"chaos{i}-{rng.randrange(10**6)}", pool="solo"), env=env, log=log
        )

    pool = [start_worker(i) for i in range(workers)]
    born = [time.monotonic() for _ in pool]
    beat = start_python(celery_beat_args(crash_dir / "beat-schedule"), env=env, log=log)
    kills = _Crashes()
    started_at = time.monotonic()
    run_ids = [
        run_start(
            tenant=tenant,
            workflow_name="refund",
            input={"order_id": o, "reason": "chaos check"},
            actor="chaos",
            idempotency_key=o,
        ).run.run_id
        for o in order_ids
    ]
    worker_exits = 0
    next_kill = (
        time.monotonic() + rng.expovariate(1 / scenario.kill_interval) if scenario.kill_interval else None
    )
    moved_at_kill = -1
    try:
        while time.monotonic() - started_at < timeout:
            for i, proc in enumerate(pool):
                if proc.poll() is not None:
                    worker_exits += 1
                    pool[i], born[i] = start_worker(i), time.monotonic()
            # A worker killed while it is still starting proves nothing and, on a loaded machine, can
            # keep every run from moving until the scenario times out: the victim is one that has
            # been up for KILL_MIN_AGE, at a random moment of its work.
            grown = [i for i, at in enumerate(born) if time.monotonic() - at >= KILL_MIN_AGE]
            # Nor does one that lands before the runs moved since the last: a loaded machine whose
            # workers boot slower than the kills come would only ever kill workers at their first
            # claim. Between two kills the runs take at least one step, each kill at a random moment.
            moved = sum(AgentRun.objects.filter(run_id__in=run_ids).values_list("state_revision", flat=True))
            if next_kill is not None and time.monotonic() >= next_kill and grown and moved > moved_at_kill:
                victim = rng.choice(grown)
                held = AgentRun.objects.filter(lease_owner__endswith=f":{pool[victim].pid}").values_list(
                    "run_id", flat=True
                )  # a solo worker's lease owner is host:pid
                held_ids = [str(r) for r in held]
                kill_group(pool[victim])
                kills.at.append(time.time())
                kills.hit.extend((run_id, kills.at[-1]) for run_id in held_ids)
                pool[victim], born[victim] = start_worker(victim), time.monotonic()
                next_kill = time.monotonic() + rng.expovariate(1 / scenario.kill_interval)
                moved_at_kill = moved
            settled = AgentRun.objects.filter(run_id__in=run_ids).exclude(status="running").count()
            progress(scenario.name, settled, runs, worker_exits + len(kills.at))
            if settled == runs:
                break
            time.sleep(0.2)
    finally:
        stop_groups([*pool, beat], grace=0)
        log.close()
        admin.clear_faults()
    elapsed = time.monotonic() - started_at
    crashed = [(m.name.split("--", 1)[1], m.stat().st_mtime) for m in crash_dir.glob("*--*")]
    recoveries = _recoveries([*crashed, *kills.hit])
    return _measure(scenario, run_ids, order_ids, admin, recoveries, worker_exits + len(kills.at), elapsed)


def _recoveries(crashes: list[tuple[str, float]]) -> list[float]:
    """Seconds from each crash to the next event of the run it hit (the next owner's take-over, or
    the next step when the crash came after a checkpoint)."""
    recoveries = []
    for run_id, crashed_at in crashes:
        after = datetime.fromtimestamp(crashed_at, UTC)
        event = (
            AgentEvent.objects.filter(run_id=uuid.UUID(run_id), created_at__gt=after).order_by("seq").first()
        )
        if event is not None:
            recoveries.append(event.created_at.timestamp() - crashed_at)
    return recoveries


def _measure(
    scenario: Scenario,
    run_ids: list[uuid.UUID],
    order_ids: list[str],
    admin: SandboxAdmin,
    recoveries: list[float],
    crashes: int,
    elapsed: float,
) -> dict[str, Any]:
    statuses = dict(
        AgentRun.objects.filter(run_id__in=run_ids).values_list("status").annotate(n=Count("run_id"))
    )
    reasons = dict(
        AgentRun.objects.filter(run_id__in=run_ids, status="suspended")
        .values_list("suspend_reason")
        .annotate(n=Count("run_id"))
    )
    ledger = {o: len(admin.refunds(o)) for o in order_ids}
    ops = ToolOperation.objects.filter(run_id__in=run_ids)
    result = {
        "runs": len(run_ids),
        "crashes": crashes,
        "completed": statuses.get("completed", 0),
        "suspended": statuses.get("suspended", 0),
        "suspended_reasons": reasons,
        "failed": statuses.get("failed", 0),
        "max_refunds_per_order": max(ledger.values(), default=0),
        "double_refunds": sum(1 for n in ledger.values() if n > 1),
        "lost_runs": statuses.get("running", 0),
        "automatic_retries_after_unknown": ops.filter(status="unknown", attempts__gt=1).count(),
        "operations": dict(ops.values_list("status").annotate(n=Count("id"))),
        "mean_recovery_s": round(statistics.mean(recoveries), 2) if recoveries else None,
        "max_recovery_s": round(max(recoveries), 2) if recoveries else None,
        "elapsed_s": round(elapsed, 1),
    }
    broken = []
    if result["double_refunds"]:
        broken.append("double refunds")
    if result["lost_runs"]:
        broken.append("lost runs")
    if scenario.expect == "completed" and result["completed"] != len(run_ids):
        broken.append("not every run completed")
    if scenario.expect == "reconciliation_required":
        if reasons.get("reconciliation_required", 0) != len(run_ids):
            broken.append("not every run suspended for reconciliation")
        if (
            result["operations"].get("unknown", 0) != len(run_ids)
            or result["automatic_retries_after_unknown"]
        ):
            broken.append("an unknown operation was retried or left its status")
    result["broken"] = broken
    return result
