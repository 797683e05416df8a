"""langgraph_put: KeeperSaver's checkpoint put beside LangGraph's own PostgresSaver, same server, same process.

Both savers get the same chain of checkpoints (a growing message list and a counter, two channels
changed per put, as a chat graph's supersteps do). Keeper's put also binds the tenant, writes under
row-level security and locks the thread's run row (ordered with a cancel or an erasure);
PostgresSaver, as the owner role in a schema of its own, does neither.
The two take turns every CHUNK puts, so drift in the machine's load hits both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.memory import percentile, vacuum
from core.processes import current_database_url
from core.tenancy import tenant_ensure

SCHEMA = "langgraph_baseline"
CHUNK = 25


def _baseline_url() -> str:
    """A role that may create PostgresSaver's tables: the owner when configured, else the superuser
    of the embedded server, else the application's own; always in a schema of its own."""
    if "owner" in settings.DATABASES:
        s = connections["owner"].settings_dict
        parts = {"dbname": s["NAME"], "user": s["USER"], "password": s["PASSWORD"] or "", "host": s["HOST"]}
        parts["port"] = str(s["PORT"] or "")
    elif settings.KEEPER_BENCH_SUPERUSER_URL:
        parts = conninfo_to_dict(settings.KEEPER_BENCH_SUPERUSER_URL)
        parts["dbname"] = connections["default"].settings_dict["NAME"]
    else:
        parts = conninfo_to_dict(current_database_url())
    return make_conninfo(
        **{k: v for k, v in parts.items() if v not in (None, "")}, options=f"-c search_path={SCHEMA}"
    )


def _checkpoints(saver: Any, ops: int) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(checkpoint, metadata, new_versions) for a chain of puts, versions from the saver itself."""
    from langgraph.checkpoint.base.id import uuid6

    chain: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []
    versions: dict[str, Any] = {"messages": None, "step": None}
    messages: list[str] = []
    for i in range(ops):
        messages = [*messages[-19:], f"message {i}: the parcel arrived broken, order ord-{i % 97}"]
        new = {ch: saver.get_next_version(versions[ch], None) for ch in versions}
        versions = dict(new)
        checkpoint = {
            "v": 1,
            "id": str(uuid6(clock_seq=i)),
            "ts": datetime.now(UTC).isoformat(),
            "channel_values": {"messages": list(messages), "step": i},
            "channel_versions": dict(new),
            "versions_seen": {"agent": dict(new)},
            "updated_channels": ["messages", "step"],
        }
        chain.append((checkpoint, {"source": "loop", "step": i, "parents": {}}, new))
    return chain


def _puts(saver: Any, config: dict[str, Any], chain: list[Any]) -> tuple[dict[str, Any], list[float]]:
    latencies = []
    for checkpoint, metadata, new in chain:
        t0 = time.perf_counter()
        config = saver.put(config, checkpoint, metadata, new)
        latencies.append(time.perf_counter() - t0)
    return config, latencies


def _interleaved(savers: list[Any], thread: str, ops: int) -> list[list[float]]:
    """Each saver puts its own chain on its own thread, CHUNK puts at a time in turn, so a busy
    moment of the machine falls on both alike."""
    chains = [_checkpoints(saver, ops) for saver in savers]
    configs: list[dict[str, Any]] = [
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}} for _ in savers
    ]
    latencies: list[list[float]] = [[] for _ in savers]
    for start in range(0, ops, CHUNK):
        for i, saver in enumerate(savers):
            configs[i], lat = _puts(saver, configs[i], chains[i][start : start + CHUNK])
            latencies[i] += lat
    return latencies


def bench_langgraph_put(*, ops: int, rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        from runs.langgraph.saver import KeeperSaver
    except ImportError:
        return {"skipped": "the langgraph extra is not installed: pip install -e '.[langgraph]'"}
    tenant = tenant_ensure(slug="bench")
    url = _baseline_url()
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        admin.execute(f"CREATE SCHEMA {SCHEMA}")
    # Statistics as autovacuum keeps them on a running system: without any, the planner may reach
    # the run's row through a tenant index and read every run of the tenant (the first minute only).
    vacuum(["agent_runs", "agent_events", "langgraph_checkpoints", "langgraph_blobs"])
    keeper_rates, pg_rates, keeper_lat, pg_lat = [], [], [], []
    try:
        # No tenant bound around it: KeeperSaver is measured as LangGraph calls it, from any thread.
        with PostgresSaver.from_conn_string(url) as baseline:
            baseline.setup()
            keeper = KeeperSaver(tenant_id=tenant.tenant_id, actor="bench")
            stamp = time.time_ns()
            _interleaved([keeper, baseline], f"bench-warm-{stamp}", min(ops, 50))
            for r in range(rounds):
                keeper_round, pg_round = _interleaved([keeper, baseline], f"bench-{stamp}-{r}", ops)
                keeper_rates.append(ops / sum(keeper_round))
                pg_rates.append(ops / sum(pg_round))
                keeper_lat += keeper_round
                pg_lat += pg_round
                progress(
                    f"langgraph_put round {r + 1}/{rounds}: keeper {keeper_rates[-1]:.0f} puts/s, "
                    f"langgraph-checkpoint-postgres {pg_rates[-1]:.0f} puts/s"
                )
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    keeper_s, pg_s = statistics.median(keeper_rates), statistics.median(pg_rates)
    return {
        "keeper_puts_s": round(keeper_s, 1),
        "postgres_saver_puts_s": round(pg_s, 1),
        "ratio": round(keeper_s / pg_s, 3),
        "p50_ms": round(percentile(keeper_lat, 0.50) * 1000, 3),
        "p99_ms": round(percentile(keeper_lat, 0.99) * 1000, 3),
        "postgres_saver_p50_ms": round(percentile(pg_lat, 0.50) * 1000, 3),
        "postgres_saver_p99_ms": round(percentile(pg_lat, 0.99) * 1000, 3),
        "rounds": rounds,
        "puts_per_round": ops,
    }
