"""bench pooled_steps and scaling: steps/s through PgBouncer beside straight on PostgreSQL, and what a
second worker or web process adds, counted from real runs and answered requests (never timed here)."""

from __future__ import annotations

import pytest

from bench.scaling import bench_pooled_steps, bench_scaling
from tests.pooling import pgbouncer_binary
from tests.processes import flush_redis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases=["default", "owner"])]


@pytest.fixture(autouse=True)
def _clean_broker():
    flush_redis()
    yield
    flush_redis()


def test_pooled_steps_measures_the_same_runs_through_pgbouncer_and_straight() -> None:
    pgbouncer_binary()  # skips (fails in CI) without it
    lines: list[str] = []
    figures = bench_pooled_steps(runs=3, n=4, rounds=1, progress=lines.append)
    assert (figures["pool_mode"], figures["pool_size"], figures["steps_per_run"]) == ("transaction", 20, 6)
    assert figures["direct_steps_per_s"] > 0
    assert "note" not in figures, figures["note"]  # every run through the pooler finished
    assert figures["pooled_steps_per_s"] > 0
    assert figures["ratio"] == round(figures["pooled_steps_per_s"] / figures["direct_steps_per_s"], 3)
    assert any("through PgBouncer" in line for line in lines)


def test_scaling_compares_two_worker_and_two_web_processes_with_one() -> None:
    figures = bench_scaling(runs=3, n=4, rounds=1, seconds=1.0, clients=2, progress=lambda line: None)
    assert figures["steps_per_s_1_worker"] > 0 and figures["steps_per_s_2_workers"] > 0
    assert figures["workers_ratio"] == round(
        figures["steps_per_s_2_workers"] / figures["steps_per_s_1_worker"], 3
    )
    assert figures["requests_per_s_1_web"] > 0 and figures["requests_per_s_2_web"] > 0
    assert figures["web_ratio"] == round(figures["requests_per_s_2_web"] / figures["requests_per_s_1_web"], 3)
    assert figures["request_errors"] == 0  # every request answered 200: a 429 or a 500 would count
