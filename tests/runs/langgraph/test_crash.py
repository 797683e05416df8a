"""A graph process SIGKILLed in the middle of a superstep resumes from Keeper with the same result as
LangGraph's own PostgresSaver gives on the same embedded server; the finished task's write is kept, so
it does not run again."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from django.db import connections
from psycopg.conninfo import make_conninfo

from core.tenancy import tenant_bind, tenant_ensure
from runs.langgraph.saver import KeeperSaver

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases=["default", "owner"])]

SCHEMA = "langgraph_baseline"


def _baseline_url() -> str:
    """LangGraph's PostgresSaver creates its own tables: as the owner role, in a schema of its own."""
    s = connections["owner"].settings_dict
    return make_conninfo(
        dbname=s["NAME"],
        user=s["USER"],
        password=s["PASSWORD"] or "",
        host=s["HOST"],
        port=str(s["PORT"]),
        options=f"-c search_path={SCHEMA}",
    )


@pytest.fixture
def baseline_url():
    url = _baseline_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    yield url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


def _crash_then_resume(processes, tmp_path: Path, kind: str, env: dict[str, str]) -> tuple[int, dict, int]:
    out, calls, marker = tmp_path / f"{kind}.json", tmp_path / f"{kind}.calls", tmp_path / f"{kind}.crashed"
    env = {**env, "KEEPER_LG_CALLS": str(calls), "KEEPER_LG_CRASH_ONCE": str(marker)}
    args = ["-m", "tests.runs.langgraph.graph_process", kind, "thread-1", str(out)]
    first = processes.script(args, env=env)
    code = first.wait(timeout=120)
    assert marker.exists() and not out.exists(), processes.logs()
    second = processes.script(args, env=env)
    assert second.wait(timeout=120) == 0, processes.logs()
    return code, json.loads(out.read_text()), calls.read_text().count("lookup")


def test_a_killed_superstep_resumes_like_langgraphs_postgres_saver(processes, tmp_path, baseline_url) -> None:
    tenant = tenant_ensure(slug="acme", name="Acme")
    keeper_code, keeper, keeper_lookups = _crash_then_resume(
        processes, tmp_path, "keeper", {"KEEPER_LG_TENANT": str(tenant.tenant_id)}
    )
    pg_code, baseline, pg_lookups = _crash_then_resume(
        processes, tmp_path, "postgres", {"KEEPER_LG_BASELINE_URL": baseline_url}
    )

    assert keeper_code == pg_code == -9  # SIGKILL, both
    assert keeper == baseline, (keeper, baseline)
    assert keeper["log"][-1] == "answer: 3 notes" and "policy: refund allowed" in keeper["log"]
    assert keeper_lookups == pg_lookups == 1  # the finished task's write was kept: not run again

    # In Keeper: the resumed superstep's checkpoints are events of the thread's run.
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    with tenant_bind(UUID(str(tenant.tenant_id))):
        history = list(saver.list({"configurable": {"thread_id": "thread-1"}}))
    assert history[0].checkpoint["channel_values"]["log"] == keeper["log"]
