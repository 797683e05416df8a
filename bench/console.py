"""Console pages at scale: the run list and a 10,000-event run page with 100,000 runs stored, timed
as server time (Django's test client in this process: middleware, queries, templates; no network),
beside the bare ORM read of the same rows as the floor any page pays."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from bench.runs import conversation_run_bulk
from core.digests import sha256_digest
from core.tenancy import tenant_bind, tenant_ensure
from runs.kernel.models import AgentEvent, AgentRun

STATUSES = ["completed"] * 6 + ["running", "suspended", "failed", "cancelled"]


def _seed_runs(tenant: Any, n: int, progress: Callable[[str], None]) -> None:
    now = timezone.now()
    digest = sha256_digest("{}")
    batch: list[AgentRun] = []
    for i in range(n):
        status = STATUSES[i % len(STATUSES)]
        batch.append(
            AgentRun(
                run_id=uuid.uuid4(),
                tenant=tenant,
                workflow_name="demo.countdown",
                workflow_version="1",
                state_schema_version=1,
                status=status,
                next_step=None if status == "completed" else "tick",
                state={"n": i},
                state_revision=1,
                state_digest=digest,
                input_digest=digest,
                suspend_reason="operator_pause" if status == "suspended" else None,
                idempotency_key=f"bench-{i}",
                created_at=now - timedelta(seconds=n - i),
                updated_at=now - timedelta(seconds=n - i),
            )
        )
        if len(batch) == 5000:
            AgentRun.objects.bulk_create(batch)
            batch = []
            if (i + 1) % 25_000 == 0:
                progress(f"console_pages: {i + 1}/{n} runs")
    AgentRun.objects.bulk_create(batch)


def _step_run_bulk(tenant: Any, events: int) -> AgentRun:
    """A countdown run of `events` step events written in bulk (every 50th a failed attempt with its
    retry, every 500th an approval suspension and its resume): the timeline's step bars and waits
    and the steps table at their most."""
    now = timezone.now()
    digest = sha256_digest("{}")
    start = now - timedelta(seconds=events)
    run = AgentRun.objects.create(
        run_id=uuid.uuid4(),
        tenant=tenant,
        workflow_name="demo.countdown",
        workflow_version="1",
        state_schema_version=1,
        status="running",
        next_step="tick",
        state={"n": events},
        state_revision=events,
        state_digest=digest,
        input_digest=digest,
        idempotency_key=f"bench-steps-{uuid.uuid4()}",
        created_at=start,
        updated_at=now,
    )
    rows = []
    kind: str
    step: str | None
    payload: dict[str, Any]
    attempt: int | None
    for seq in range(1, events + 1):
        kind, step, payload, attempt = (
            "step_completed",
            "tick",
            {"spent": {"wall_s": 0.2}, "next_step": "tick"},
            1,
        )
        if seq == 1:
            kind, step, payload, attempt = "run_started", None, {}, None
        elif seq % 500 == 0:
            kind, payload = "run_suspended", {"reason": "approval_required", "spent": {"wall_s": 0.1}}
        elif seq % 500 == 1:
            kind, step, payload, attempt = "resume_verified", None, {"trigger": "resume_request"}, None
        elif seq % 50 == 0:
            kind, payload = (
                "step_error",
                {"spent": {"wall_s": 0.3}, "error_type": "Timeout", "retry_in_s": 0.5},
            )
        rows.append(
            AgentEvent(
                run=run,
                tenant_id=tenant.tenant_id,
                seq=seq,
                event_type=kind,
                step_id=step,
                attempt=attempt,
                payload=payload,
                actor="bench",
                state_revision=seq,
                state_digest=digest,
                created_at=start + timedelta(seconds=seq),
                run_created_at=run.created_at,
            )
        )
    AgentEvent.objects.bulk_create(rows, batch_size=2000)
    return run


def _timed(fn: Callable[[], Any], rounds: int) -> list[float]:
    fn()  # warm: templates compiled, connections open
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _get(client: Client, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}")


def bench_console_pages(
    *, runs: int, events: int, rounds: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    tenant = tenant_ensure(slug="bench-console")
    with tenant_bind(tenant.tenant_id):  # row-level security: seeding, floors and clean-up as the tenant
        return _bench_console_pages(tenant, runs=runs, events=events, rounds=rounds, progress=progress)


def _bench_console_pages(
    tenant: Any, *, runs: int, events: int, rounds: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    users = get_user_model()
    user = users.objects.filter(username="bench-console").first() or users.objects.create_superuser(
        "bench-console", password=None
    )
    try:
        _seed_runs(tenant, runs, progress)
        big = conversation_run_bulk(
            tenant_slug="bench-console", texts=[f"message {i}" for i in range(events)]
        )
        progress(f"console_pages: {runs} runs and a {events}-event run seeded")
        client = Client(HTTP_HOST="localhost")  # an allowed host outside the test runner too
        client.force_login(user)
        listed = _timed(lambda: _get(client, "/runs/"), rounds)
        list_floor = _timed(
            lambda: list(AgentRun.objects.filter(tenant=tenant).order_by("-updated_at", "-run_id")[:50]),
            rounds,
        )
        page = _timed(lambda: _get(client, f"/runs/{big.run_id}/"), rounds)
        page_floor = _timed(lambda: list(AgentEvent.objects.filter(run=big).order_by("seq")[:200]), rounds)
        stepped = _step_run_bulk(tenant, events)
        step_page = _timed(lambda: _get(client, f"/runs/{stepped.run_id}/"), rounds)
        result = {
            "runs": AgentRun.objects.filter(tenant=tenant).count(),
            "run_page_events": events,
            "rounds": rounds,
            "run_list_p50_ms": round(statistics.median(listed), 1),
            "run_list_max_ms": round(max(listed), 1),
            "run_list_floor_ms": round(statistics.median(list_floor), 1),
            "run_page_p50_ms": round(statistics.median(page), 1),
            "run_page_max_ms": round(max(page), 1),
            "run_page_floor_ms": round(statistics.median(page_floor), 1),
            # the same size of run made of steps: the timeline's step bars and waits, the steps table
            "step_run_page_p50_ms": round(statistics.median(step_page), 1),
            "step_run_page_max_ms": round(max(step_page), 1),
        }
        progress(
            f"console_pages: run list {result['run_list_p50_ms']} ms, run page {result['run_page_p50_ms']} ms, "
            f"step run page {result['step_run_page_p50_ms']} ms "
            "(target < 300 ms server time)"
        )
        return result
    finally:
        AgentEvent.objects.filter(run__tenant=tenant).delete()
        AgentRun.objects.filter(tenant=tenant).delete()
        users.objects.filter(username="bench-console").delete()
