"""make bench's langgraph_put: KeeperSaver beside LangGraph's PostgresSaver on the same server."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection, connections

from core.models import Tenant
from core.tenancy import tenant_scope
from runs.kernel.models import AgentRun


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_bench_reports_keeper_puts_beside_postgres_saver_and_cleans_up(capsys) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("bench", "--quick", "--json", "--only", "langgraph_put", stdout=out, stderr=err)
    figures = json.loads(out.getvalue())["langgraph_put"]
    with capsys.disabled():
        print("\nlanggraph_put:", figures)
    assert figures["keeper_puts_s"] > 0 and figures["postgres_saver_puts_s"] > 0
    assert figures["ratio"] == pytest.approx(
        figures["keeper_puts_s"] / figures["postgres_saver_puts_s"], rel=0.01
    )
    assert figures["p50_ms"] <= figures["p99_ms"] and "langgraph_put round 3/3" in err.getvalue()
    assert AgentRun.objects.filter(tenant__slug="bench").count() == 0  # cleaned up, the baseline's schema too
    bench = Tenant.objects.get(slug="bench")
    with tenant_scope(bench.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM langgraph_checkpoints) + (SELECT count(*) FROM langgraph_blobs)"
            " + (SELECT count(*) FROM langgraph_writes)"
        )
        assert cursor.fetchone()[0] == 0
    with connections["owner"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'langgraph_baseline'")
        assert cursor.fetchone()[0] == 0
