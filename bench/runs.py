"""Benchmarks of the durable core, each against a baseline measured side by side in the same run.

commit_step: the engine's commit (state validation, canonical JSON, digest, the one-statement
CTE through Django's connection) against the fastest correct raw form of the same write: the
same JSON + digest work and the single CTE of DESIGN.md (the state goes into the run row and the
event, as the engine writes it) on a plain psycopg connection, prepared.
Rounds alternate engine and baseline so drift in the machine hits both alike.

run_e2e: whole runs as a user sees them, started through the service layer and executed by real
Celery worker processes this benchmark starts, timed from the events' own timestamps; beside
them DBOS (bench.peers) runs as many workflows of as many trivial steps on the same server.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
from django.conf import settings
from django.db import connections
from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from bench.memory import percentile, vacuum
from bench.peers import dbos_missing, dbos_steps_per_s
from core.digests import canonical_json
from core.models import Tenant
from core.processes import (
    celery_worker_args,
    celery_worker_env,
    current_database_url,
    start_python,
    stop_groups,
)
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.state import state_encode

_RAW_COMMIT = """
WITH u AS (
  UPDATE agent_runs SET state = %(state)s::jsonb, state_digest = %(digest)s, next_step = %(next)s, status = 'running',
         state_revision = state_revision + 1, updated_at = now()
   WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND state_revision = %(expected)s AND lease_epoch = %(epoch)s
  RETURNING run_id, tenant_id, state_revision, created_at)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, state, next_step, created_at, run_created_at)
SELECT run_id, tenant_id, state_revision, 'step_completed', %(step)s, 1, %(payload)s::jsonb, %(actor)s,
       state_revision, %(digest)s, %(state)s::jsonb, %(next)s, now(), created_at FROM u
RETURNING seq
"""


def _bench_state(i: int) -> dict[str, Any]:
    # About 1 KB, like a refund run's state: inputs, step results, budgets, references.
    return {
        "n": 3,
        "order": {
            "id": f"ord-{i % 97}",
            "amount_minor": 129_900,
            "currency": "EUR",
            "items": list(range(12)),
        },
        "decision": {"code": "REFUND_OK", "reasons": ["delivered", "within_30_days", "amount_under_limit"]},
        "budgets": {"steps": {"limit": 50, "used": i % 50}, "tokens": {"limit": 200_000, "used": 1234 + i}},
        "artifacts": [{"digest": "sha256:" + "ab" * 32, "uri": "file:///data/artifacts/ab/abab"}],
        "notes": "x" * 520,
        "tick": i,
    }


def _new_run(tenant: Tenant) -> tuple[UUID, int, int]:
    start_input = {k: v for k, v in _bench_state(0).items() if k != "budgets"}  # the engine sets its own
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input=start_input, actor="bench").run
    grant = apply(m.LeaseTaken(run.run_id, run.tenant_id, "bench", 3600))
    if grant is None:
        raise RuntimeError("a fresh benchmark run could not be leased")
    return run.run_id, grant.revision, grant.epoch


def _engine_round(ops: int) -> list[float]:
    tenant = tenant_ensure(slug="bench")
    with tenant_bind(tenant.tenant_id):  # as a worker's task: the run's tenant for the whole task
        return _engine_commits(tenant, ops)


def _engine_commits(tenant: Tenant, ops: int) -> list[float]:
    run_id, revision, epoch = _new_run(tenant)
    latencies = []
    for i in range(ops):
        t0 = time.perf_counter()
        encoded = state_encode(_bench_state(i))
        held = m.Held(run_id, tenant.tenant_id, "bench", epoch, revision, 1)
        seq = apply(m.StepCommitted(held, encoded, "tick", "tick", {"next_step": "tick"}, keep_lease=True))
        latencies.append(time.perf_counter() - t0)
        if seq != revision + 1:
            raise RuntimeError(f"the engine's commit was refused at revision {revision}")
        revision = seq
    return latencies


def _raw_round(ops: int, dsn: str) -> list[float]:
    tenant = tenant_ensure(slug="bench")
    with tenant_bind(tenant.tenant_id):
        run_id, revision, epoch = _new_run(tenant)
    latencies = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The same row-level security conditions as the engine: the application role, with the
        # run's tenant set for the session, so every statement pays the same policy checks.
        conn.execute("SELECT set_config('app.tenant_id', %s, false)", [str(tenant.tenant_id)])
        for i in range(ops):
            t0 = time.perf_counter()
            text = json.dumps(_bench_state(i), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
            row = conn.execute(
                _RAW_COMMIT,
                {
                    "state": text,
                    "next": "tick",
                    "run": run_id,
                    "tenant": tenant.tenant_id,
                    "expected": revision,
                    "epoch": epoch,
                    "step": "tick",
                    "payload": '{"next_step":"tick"}',
                    "actor": "bench",
                    "digest": digest,
                },
                prepare=True,
            ).fetchone()
            latencies.append(time.perf_counter() - t0)
            if row is None or row[0] != revision + 1:
                raise RuntimeError(f"the baseline's commit was refused at revision {revision}")
            revision = row[0]
    return latencies


def bench_commit_step(*, ops: int, rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    dsn = current_database_url()
    _engine_round(min(ops, 50))  # warm both paths: connections, prepared statements, caches
    _raw_round(min(ops, 50), dsn)
    engine_rates, raw_rates, engine_lat, raw_lat = [], [], [], []
    for r in range(rounds):
        lat = _engine_round(ops)
        engine_rates.append(ops / sum(lat))
        engine_lat += lat
        lat = _raw_round(ops, dsn)
        raw_rates.append(ops / sum(lat))
        raw_lat += lat
        progress(
            f"commit_step round {r + 1}/{rounds}: engine {engine_rates[-1]:.0f} ops/s, raw {raw_rates[-1]:.0f} ops/s"
        )
    engine, raw = statistics.median(engine_rates), statistics.median(raw_rates)
    return {
        "engine_ops_s": round(engine, 1),
        "raw_ops_s": round(raw, 1),
        "ratio": round(engine / raw, 3),
        "p50_ms": round(percentile(engine_lat, 0.50) * 1000, 3),
        "p99_ms": round(percentile(engine_lat, 0.99) * 1000, 3),
        "raw_p50_ms": round(percentile(raw_lat, 0.50) * 1000, 3),
        "raw_p99_ms": round(percentile(raw_lat, 0.99) * 1000, 3),
        "rounds": rounds,
        "ops_per_round": ops,
        "state_bytes": len(canonical_json(_bench_state(1)).encode()),
    }


def conversation_run_bulk(*, tenant_slug: str, texts: list[str]) -> AgentRun:
    """A conversation run holding these messages (alternating user/assistant), written in bulk: what
    as many appends would leave, without waiting for them."""
    tenant = tenant_ensure(slug=tenant_slug)
    with tenant_bind(tenant.tenant_id):
        return _conversation_run_bulk(tenant, texts)


def _conversation_run_bulk(tenant: Tenant, texts: list[str]) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="bench").run
    digest = AgentEvent.objects.get(run=run, seq=1).state_digest
    now = timezone.now()
    AgentEvent.objects.bulk_create(
        [
            AgentEvent(
                run=run,
                tenant_id=tenant.tenant_id,
                seq=i + 2,
                event_type="user_message" if i % 2 == 0 else "assistant_message",
                payload={"client_message_id": f"m-{i}", "content": text},
                actor="bench",
                state_revision=i + 2,
                state_digest=digest,
                client_message_id=f"m-{i}",
                created_at=now,
                run_created_at=run.created_at,
            )
            for i, text in enumerate(texts)
        ],
        batch_size=2000,
    )
    AgentRun.objects.filter(pk=run.pk).update(state_revision=len(texts) + 1)
    run.refresh_from_db()
    return run


def bench_context_build(*, events: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """Building a run's context against merely reading its events (the floor any build pays)."""
    from runs.conversations.compaction.tokens import token_counter
    from runs.conversations.context import context_build

    texts = [
        f"Message {i}: where is my parcel for order ord-{i % 97}? It was due on Monday."
        for i in range(events)
    ]
    texts[5] = "Refund 25.00 EUR for order ord-5, and never call me by phone."
    run = conversation_run_bulk(tenant_slug="bench", texts=texts)
    counter = token_counter("gpt-4o-mini")

    def timed(fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1000

    read = statistics.median(
        timed(lambda: list(AgentEvent.objects.filter(run=run).order_by("seq"))) for _ in range(3)
    )
    cold = timed(lambda: context_build(run=run, counter=counter))  # compacts: writes the summaries
    warm = statistics.median(timed(lambda: context_build(run=run, counter=counter)) for _ in range(3))
    progress(
        f"context_build over {events} events: read {read:.0f} ms, build {warm:.0f} ms (first {cold:.0f} ms)"
    )
    return {
        "events": events,
        "read_ms": round(read, 1),
        "build_ms": round(warm, 1),
        "first_build_ms": round(cold, 1),
        "ratio": round(warm / read, 2),
        "tokens_exact": counter.exact,
    }


# --- run_e2e: whole runs through real workers ---------------------------------------------------


def bench_run_e2e(
    *,
    runs: int,
    n: int,
    sequential: int,
    rounds: int,
    peer_processes: int = 2,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """`sequential` demo.countdown runs of n ticks (n + 2 steps) one after another, for the latency a
    run alone sees; then `rounds` rounds of `runs` such runs started at once, each followed by DBOS
    on the same server in `peer_processes` processes. Keeper's runs go to one Celery worker with the
    pool and concurrency `make run` gives it (KEEPER_WORKER_POOL, KEEPER_WORKER_CONCURRENCY). Keeper's
    figures come from the events' created_at (the server's clock); medians over the rounds are reported."""
    pool, concurrency = settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY
    tenant = tenant_ensure(slug="bench")
    vacuum(["agent_runs", "agent_events"])  # as in bench.langgraph: statistics a running system has
    log = tempfile.NamedTemporaryFile(prefix="keeper-bench-worker-", suffix=".log", delete=False)  # noqa: SIM115
    env = {
        **os.environ,
        "DATABASE_URL": current_database_url(),
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE,
    }
    worker = start_python(
        celery_worker_args("bench", concurrency=concurrency, pool=pool),
        env={**env, **celery_worker_env(pool)},
        log=log,
    )
    batches: list[dict[str, Any]] = []
    peers: list[dict[str, Any]] = []
    try:
        with tenant_bind(tenant.tenant_id):
            _countdowns_done(_countdowns(tenant, 1, n), timeout=180, log=log.name)  # the pool is up
            # A batch as large as a round, not measured: every thread of the pool opens its database
            # connection (and prepares its statements) here, not in the first measured round. DBOS's
            # peers connect in DBOS.launch(), before they are timed.
            _countdowns_done(_countdowns(tenant, runs, n), timeout=600, log=log.name)
            alone: list[UUID] = []
            for _ in range(sequential):
                alone += _countdowns_done(_countdowns(tenant, 1, n), timeout=60, log=log.name)
            single = _event_figures(alone)
            server = _server_pid()
            for r in range(rounds):  # alternate Keeper and DBOS, so drift in the machine hits both
                before = _tree_cpu_s(worker.pid), _tree_cpu_s(server)
                batch = _event_figures(
                    _countdowns_done(_countdowns(tenant, runs, n), timeout=600, log=log.name)
                )
                for key, pid, start in zip(_CPU_KEYS, (worker.pid, server), before, strict=True):
                    end = _tree_cpu_s(pid)
                    spent = None if start is None or end is None else end - start
                    batch[key] = round(spent * 1000 / batch["steps"], 3) if spent is not None else None
                batches.append(batch)
                progress(
                    f"run_e2e round {r + 1}/{rounds} Keeper: {batch['steps']} steps at {batch['steps_per_s']} "
                    f"steps/s, p50 run {batch['p50_run_ms']} ms under load, CPU per step: worker "
                    f"{batch['worker_cpu_ms_per_step']} ms, PostgreSQL {batch['postgres_cpu_ms_per_step']} ms"
                )
                peers.append(
                    _dbos_beside(runs=runs, steps=n + 2, processes=peer_processes, progress=progress)
                )
    finally:
        stop_groups([worker], grace=5)
        log.close()
        os.unlink(log.name)
    figures: dict[str, Any] = {
        "steps": batches[0]["steps"],
        "runs": batches[0]["runs"],
        "p50_run_ms": single["p50_run_ms"],
        "p50_run_ms_under_load": statistics.median(b["p50_run_ms"] for b in batches),
        "steps_per_s": statistics.median(b["steps_per_s"] for b in batches),
        "steps_per_s_rounds": [b["steps_per_s"] for b in batches],
        "rounds": rounds,
        "single_runs": single["runs"],
        "single_steps": single["steps"],
        "worker_pool": pool,
        "worker_concurrency": concurrency,
        "dbos_processes": peer_processes,
        "slice_steps": settings.KEEPER_SLICE_STEPS,
        "slice_ms": settings.KEEPER_SLICE_MS,
    }
    for key in _CPU_KEYS:
        values = [b[key] for b in batches if b[key] is not None]
        figures[key] = statistics.median(values) if values else None
    progress(
        f"run_e2e Keeper: p50 run {figures['p50_run_ms']} ms alone, median {figures['steps_per_s']} steps/s"
    )
    figures.update(_median_peers(peers))
    for prefix in ("", "_threads"):
        dbos_rate = figures[f"dbos{prefix}_steps_per_s"]
        figures[f"ratio_vs_dbos{prefix}"] = (
            round(figures["steps_per_s"] / dbos_rate, 2) if dbos_rate else None
        )
    return figures


# CPU per step of the worker process and of the database server (its postmaster with every backend,
# the exited ones through the postmaster's reaped children), over each round: unlike the rounds' wall
# time, which a busy neighbour on a shared machine stretches, what a step costs (None where the
# server is not a process on this machine). The server's figure includes the benchmark's own polling.
_CPU_KEYS = ("worker_cpu_ms_per_step", "postgres_cpu_ms_per_step")


def _server_pid() -> int | None:
    """The PostgreSQL server's postmaster, if it runs on this machine: the parent of this backend."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    try:
        with open(f"/proc/{backend}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            return parent if b"postgres" in cmdline.read() else None
    except (OSError, ValueError, IndexError):
        return None


def _tree_cpu_s(root: int | None) -> float | None:
    """User + system seconds of a process, its reaped children and its live descendants."""
    if root is None or not os.path.isdir("/proc"):  # no /proc (macOS): no figure
        return None
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    spent: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
        spent[int(entry)] = sum(int(value) for value in fields[11:15]) / tick  # utime stime cutime cstime
    if root not in spent:
        return None
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def _median_peers(peers: list[dict[str, Any]]) -> dict[str, Any]:
    """DBOS's figures over the rounds: medians of the numbers, the counts of the first round, a note if any."""
    merged: dict[str, Any] = dict(peers[0])
    for key in ("dbos_steps_per_s", "dbos_p50_run_ms", "dbos_threads_steps_per_s", "dbos_threads_p50_run_ms"):
        values = [p[key] for p in peers if p.get(key) is not None]
        merged[key] = statistics.median(values) if values else None
        if key.endswith("steps_per_s"):
            merged[f"{key}_rounds"] = [p.get(key) for p in peers]
    notes = sorted({p["dbos_note"] for p in peers if p.get("dbos_note")})
    if notes:
        merged["dbos_note"] = "; ".join(notes)
    return merged


def _countdowns(tenant: Tenant, count: int, n: int) -> list[UUID]:
    return [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="bench").run.run_id
        for _ in range(count)
    ]


def _countdowns_done(run_ids: list[UUID], *, timeout: float, log: str) -> list[UUID]:
    deadline = time.monotonic() + timeout
    while True:
        statuses = dict(
            AgentRun.objects.filter(run_id__in=run_ids).values_list("status", "suspend_reason").distinct()
        )
        if set(statuses) == {"completed"}:
            return run_ids
        stuck = {
            status: reason for status, reason in statuses.items() if status not in {"running", "completed"}
        }
        if stuck or time.monotonic() > deadline:
            with open(log, errors="replace") as worker_log:
                tail = worker_log.read()[-2000:]
            raise RuntimeError(
                f"benchmark runs did not complete ({stuck or 'timed out'}); worker log:\n{tail}"
            )
        # Not a timing (the figures come from the events): looking less often leaves the machine
        # to the runs, as DBOS's peers wait for their workflows without asking the database.
        time.sleep(0.05)


def _event_figures(run_ids: list[UUID]) -> dict[str, Any]:
    """Steps (events a step committed) and times, from the runs' events: per run first to last event,
    and all steps over the first event of all to the last."""
    rows = list(
        AgentEvent.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(
            first=Min("created_at"),
            last=Max("created_at"),
            steps=Count("seq", filter=Q(step_id__isnull=False)),
        )
    )
    steps = sum(r["steps"] for r in rows)
    window = (max(r["last"] for r in rows) - min(r["first"] for r in rows)).total_seconds()
    per_run = [(r["last"] - r["first"]).total_seconds() * 1000 for r in rows]
    return {
        "runs": len(rows),
        "steps": steps,
        "p50_run_ms": round(percentile(per_run, 0.5), 1),
        "steps_per_s": round(steps / window, 1) if window else None,
    }


def _dbos_beside(*, runs: int, steps: int, processes: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """DBOS's figures: with Keeper's concurrency (each peer process runs one workflow at a time, as
    each Celery pool process runs one task), and with every workflow started at once on its threads."""
    figures: dict[str, Any] = {
        "dbos_steps": None,
        "dbos_steps_per_s": None,
        "dbos_p50_run_ms": None,
        "dbos_threads_steps_per_s": None,
        "dbos_threads_p50_run_ms": None,
    }
    why = dbos_missing()
    if why is None:
        alias = (
            "owner" if "owner" in connections.databases else "default"
        )  # the role that may create a database
        try:
            for together, prefix in ((False, "dbos"), (True, "dbos_threads")):
                measured = dbos_steps_per_s(
                    settings_dict=connections[alias].settings_dict,
                    workflows=runs,
                    steps=steps,
                    processes=processes,
                    together=together,
                    progress=progress,
                )
                figures.update({f"{prefix}_{key}": value for key, value in measured.items()})
            return figures
        except Exception as exc:  # a peer that cannot run here leaves Keeper's figures standing
            why = f"DBOS could not be measured: {type(exc).__name__}: {str(exc)[:500]}"
    progress(f"run_e2e: {why}")
    return {**figures, "dbos_note": why}
