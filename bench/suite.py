"""The whole benchmark suite by name (manage.py bench): commit_step, run_e2e, context_build, context,
memory_search, retrieval_search, console_pages, langgraph_put, pooled_steps, scaling."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from bench.console import bench_console_pages
from bench.context import bench_context
from bench.langgraph import bench_langgraph_put
from bench.memory import bench_memory_search
from bench.retrieval import bench_retrieval_search
from bench.runs import bench_commit_step, bench_context_build, bench_run_e2e
from bench.scaling import bench_pooled_steps, bench_scaling
from core.models import Tenant
from core.tenancy import tenant_bind
from runs.kernel.models import AgentRun


def _console_pages(*, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    return bench_console_pages(
        runs=2000 if quick else 100_000,
        events=1000 if quick else 10_000,
        rounds=5 if quick else 20,
        progress=progress,
    )


def bench_all(
    *, quick: bool, progress: Callable[[str], None] | None = None, only: list[str] | None = None
) -> dict[str, Any]:
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    benches: dict[str, Callable[[], dict[str, Any]]] = {
        "commit_step": lambda: bench_commit_step(ops=300 if quick else 2000, rounds=3, progress=say),
        "run_e2e": lambda: bench_run_e2e(
            runs=10 if quick else 100,
            n=20,
            sequential=3 if quick else 20,
            rounds=1 if quick else 5,
            progress=say,
        ),
        "context_build": lambda: bench_context_build(events=2000 if quick else 10_000, progress=say),
        "context": lambda: bench_context(
            small=300 if quick else 1000,
            large=3000 if quick else 10_000,
            rounds=3 if quick else 9,
            progress=say,
        ),
        "memory_search": lambda: bench_memory_search(
            items=3000 if quick else 100_000, queries=50 if quick else 200, progress=say
        ),
        "retrieval_search": lambda: bench_retrieval_search(
            chunks=3000 if quick else 200_000, queries=50 if quick else 200, progress=say
        ),
        "console_pages": lambda: _console_pages(quick=quick, progress=say),
        "langgraph_put": lambda: bench_langgraph_put(ops=300 if quick else 2000, rounds=3, progress=say),
        "pooled_steps": lambda: bench_pooled_steps(
            runs=10 if quick else 100, n=20, rounds=1 if quick else 3, progress=say
        ),
        "scaling": lambda: bench_scaling(
            runs=10 if quick else 100,
            n=20,
            rounds=1 if quick else 3,
            seconds=3.0 if quick else 10.0,
            clients=8 if quick else 16,
            progress=say,
        ),
    }
    unknown = sorted(set(only or []) - set(benches))
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(benches)}")
    try:
        return {name: run() for name, run in benches.items() if not only or name in only}
    finally:
        bench = Tenant.objects.filter(slug="bench").first()
        if bench is not None:
            with tenant_bind(bench.tenant_id):
                AgentRun.objects.filter(tenant=bench).delete()
