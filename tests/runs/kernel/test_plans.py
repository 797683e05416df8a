"""The kernel finds a run through an index on its id, however many runs its tenant has."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from core.tenancy import tenant_bind
from runs.engine.runs import run_start
from runs.kernel._sql import leases

pytestmark = pytest.mark.django_db
# The indexes whose conditions name the run: the primary key, and the tenant's runs by id.
BY_RUN = {"agent_runs_pkey", "agent_runs_tenant_run_idx"}


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def test_a_lease_is_taken_through_the_runs_id_not_by_reading_its_tenants_runs(tenant):
    """The row to update is named by run_id, not only through the locked row it joins; and no index
    on tenant_id alone is left for the planner to read a whole tenant through (it cannot tell that
    the statement's tenant and row-level security's `tenant_id = ANY (...)` are one condition, and
    costed that read like the one row of the primary key)."""
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="t").run.run_id
        for _ in range(150)
    ]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agent_runs")
    params = {"run_id": runs[75], "tenant_id": tenant.tenant_id, "owner": "t", "ttl": 30, "external": False}
    with tenant_bind(tenant.tenant_id), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + leases._LEASE_TAKE, params)
        [explained] = cursor.fetchone()[0]
        transaction.set_rollback(True)
    scans = [
        node
        for node in _nodes(explained["Plan"])
        if node.get("Relation Name") == "agent_runs" and "Scan" in node["Node Type"]
    ]
    assert len(scans) == 2, scans
    for scan in scans:
        assert scan.get("Index Name") in BY_RUN and "run_id =" in scan["Index Cond"], scan
        assert scan["Actual Rows"] <= 1 and scan["Actual Loops"] == 1, scan
    assert explained["Plan"]["Actual Rows"] == 1  # and it took the lease
