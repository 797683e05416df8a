"""runs.engine.selectors: the run lists are keyset pages the indexes serve (the row comparison is an
index condition, never a filter over rows read) in every order, and a page per tenant merges in key
order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.pagination import keyset_after
from core.tenancy import tenant_bind_request
from runs.engine.runs import run_start
from runs.engine.selectors import RUN_ORDERS, run_filtered_page
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db
# The index of a tenant's list in each column's order.
INDEXES = {
    "workflow_name": "agent_runs_tenant_wf_idx",
    "status": "agent_runs_tenant_st_cre_idx",
    "subject": "agent_runs_tenant_subject_idx",
    # One tenant's runs by run_id: its (tenant_id, run_id) index, or on a few rows the primary key
    # with the tenant as a filter; either reads a range of run_ids.
    "tenant_slug": ("agent_runs_tenant_run_idx", "agent_runs_pkey"),
}


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        # A tiny table would be read whole, or through the tenant index and sorted, whatever the
        # query says; with both off, the plan shows whether the row comparison can drive the index.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_incremental_sort = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_row_comparison_is_an_index_condition_of_the_tenant_index(tenant):
    for i in range(3):
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t")
    first = run_filtered_page(tenant_ids=[tenant.tenant_id], filters={}, cursor=None, limit=2)
    assert first.more and first.next_cursor is not None
    page = keyset_after(
        AgentRun.objects.filter(tenant_id=tenant.tenant_id),
        keys=("updated_at", "run_id"),
        cursor=first.next_cursor,
    )[:3]
    plan = _plan(page)
    assert "agent_runs_tenant_updated_idx" in plan, plan
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "ROW(updated_at, run_id) <" in index_cond, plan


def test_pages_over_several_tenants_merge_in_key_order_and_stay_in_the_users_tenants(tenant, other_tenant):
    for t in (tenant, other_tenant, tenant, other_tenant, tenant):
        run_start(tenant=t, workflow_name="demo.countdown", input={"n": 1}, actor="t")
    both = [tenant.tenant_id, other_tenant.tenant_id]
    tenant_bind_request(SimpleNamespace(), both)  # as the console binds a user of several tenants
    expected = list(
        AgentRun.objects.filter(tenant_id__in=both)
        .order_by("-updated_at", "-run_id")
        .values_list("run_id", flat=True)
    )
    seen, cursor = [], None
    while True:
        page = run_filtered_page(tenant_ids=both, filters={}, cursor=cursor, limit=2)
        seen += [run.run_id for run in page.rows]
        if not page.more:
            break
        cursor = page.next_cursor
    assert seen == expected
    only_theirs = run_filtered_page(tenant_ids=[other_tenant.tenant_id], filters={}, cursor=None, limit=50)
    assert {run.tenant_id for run in only_theirs.rows} == {other_tenant.tenant_id} and len(
        only_theirs.rows
    ) == 2


@pytest.mark.parametrize("name", ["workflow", "status_desc", "subject", "tenant_desc"])
def test_each_column_order_reads_a_range_of_a_tenant_index(tenant, name):
    for i in range(3):
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t")
    order = RUN_ORDERS[name]
    first = run_filtered_page(tenant_ids=[tenant.tenant_id], filters={}, cursor=None, limit=2, order=name)
    assert first.more and first.next_cursor is not None
    with CaptureQueriesContext(connection) as queries:
        run_filtered_page(
            tenant_ids=[tenant.tenant_id], filters={}, cursor=first.next_cursor, limit=2, order=name
        )
    # the statement as sent, less the tenant's set_config the backend puts before it
    sql = queries.captured_queries[-1]["sql"].split("; ", 1)[-1]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        # On three rows an index on the first column plus an incremental sort can cost the same.
        cursor.execute("SET LOCAL enable_incremental_sort = off")
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    indexes = INDEXES[order.column]
    assert any(index in plan for index in ([indexes] if isinstance(indexes, str) else indexes)), plan
    assert "Sort" not in plan, plan
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "run_id" in index_cond, plan
