"""Run data is isolated by PostgreSQL itself: raw SQL as the application role, tenant by tenant."""

from __future__ import annotations

import uuid

import pytest
from django.db import DatabaseError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.tenancy import TENANT_SETTING, run_tenant, tenant_bind, tenant_ensure
from runs.engine.approvals import approval_check
from runs.engine.operations import operation_prepare_once
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import Summary

TABLES = ("agent_runs", "agent_events", "tool_operations", "approvals", "summaries")
FUNCTIONS = (
    "keeper_run_tenant",
    "keeper_redispatch_claim",
    "keeper_forks_expired",
    "keeper_run_tenants",
    "keeper_run_status_counts",
    "keeper_operation_status_counts",
    "keeper_lease_takeover_count",
)


def _seed(tenant, i: int) -> uuid.UUID:
    """A run with events, an operation, an approval and a summary, written as the tenant."""
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    operation_prepare_once(
        tenant_id=tenant.tenant_id,
        operation_id=f"op-{i}",
        run_id=run.run_id,
        step_id="s",
        tool_name="payments.refund",
        tool_contract_version="v1",
        request={"i": i},
        actor="t",
    )
    approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request={"i": i},
        request_digest=f"sha256:{i}",
        reasons=["r"],
        actor="t",
    )
    with tenant_bind(tenant.tenant_id):
        Summary.objects.create(
            tenant=tenant,
            run=run,
            covers_from_seq=1,
            covers_to_seq=1,
            source_digest="d",
            compactor={"test": 1},
            text="t",
            token_count=1,
        )
    return run.run_id


def _raw_insert(table: str, tenant_id: uuid.UUID, run_id: uuid.UUID) -> None:
    """One row of `table` claiming `tenant_id` (raw SQL, every NOT NULL column given)."""
    statements = {
        "agent_runs": "INSERT INTO agent_runs (run_id, tenant_id, workflow_name, workflow_version, state_schema_version,"
        " status, state, state_revision, suspend_detail, lease_epoch, attempt, input_digest, resume_requested_by,"
        " subject, state_digest, created_at, updated_at) VALUES (gen_random_uuid(), %(t)s, 'w', '1', 1, 'running',"
        " '{}', 1, '', 0, 0, 'd', '', '', 'd', now(), now())",
        "agent_events": "INSERT INTO agent_events (run_id, tenant_id, seq, event_type, payload, actor, state_revision,"
        " state_digest, created_at) VALUES (%(r)s, %(t)s, 999, 'x', '{}', 'a', 999, 'd', now())",
        "tool_operations": "INSERT INTO tool_operations (operation_id, tenant_id, run_id, step_id, tool_name,"
        " tool_contract_version, request_digest, status, attempts, history, created_at, updated_at)"
        " VALUES ('planted', %(t)s, %(r)s, 's', 't', 'v', 'd', 'prepared', 0, '[]', now(), now())",
        "approvals": "INSERT INTO approvals (approval_id, tenant_id, run_id, step_id, request, request_digest, reasons,"
        " status, expires_at, decided_by, note, created_at) VALUES (gen_random_uuid(), %(t)s, %(r)s, 's', '{}', 'd',"
        " '[]', 'pending', now(), '', '', now())",
        "summaries": "INSERT INTO summaries (summary_id, tenant_id, run_id, covers_from_seq, covers_to_seq,"
        " source_digest, compactor, facts, open_questions, decisions, carry, text, token_count, status, created_at)"
        " VALUES (gen_random_uuid(), %(t)s, %(r)s, 1, 1, 'd', '{}', '[]', '[]', '[]', '{}', 't', 1, 'valid', now())",
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statements[table], {"t": tenant_id, "r": run_id})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 2), min_size=1, max_size=6))
def test_no_raw_statement_reads_writes_or_moves_another_tenants_run_data(db, owners):
    tenants = [tenant_ensure(slug=f"rls{i}") for i in range(3)]
    runs = {t.tenant_id: [] for t in tenants}
    for i, owner in enumerate(owners):
        runs[tenants[owner].tenant_id].append(_seed(tenants[owner], i))
    for tenant in tenants:
        mine = tenant.tenant_id
        others = [t.tenant_id for t in tenants if t.tenant_id != mine]
        theirs = next((r for t in others for r in runs[t]), None)
        with tenant_bind(mine):
            with connection.cursor() as cursor:
                for table in TABLES:
                    cursor.execute(f"SELECT DISTINCT tenant_id FROM {table}")
                    assert {row[0] for row in cursor.fetchall()} <= {mine}, table
                    cursor.execute(f"SELECT count(*) FROM {table} WHERE tenant_id <> %s", [mine])
                    assert cursor.fetchone() == (0,), table
                    # Updating another tenant's rows reaches none; moving mine to another tenant is refused.
                    cursor.execute(f"UPDATE {table} SET tenant_id = tenant_id WHERE tenant_id <> %s", [mine])
                    assert cursor.rowcount == 0, table
                    if runs[mine]:
                        with (
                            pytest.raises(DatabaseError, match="row-level security"),
                            transaction.atomic(),
                            connection.cursor() as inner,
                        ):
                            inner.execute(f"UPDATE {table} SET tenant_id = %s", [others[0]])
                for table in TABLES:  # a row that claims another tenant cannot be written
                    with pytest.raises(DatabaseError, match="row-level security"):
                        _raw_insert(table, others[0], theirs or uuid.uuid4())
            counts = {}
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM agent_runs")
                counts["runs"] = cursor.fetchone()[0]
            assert counts["runs"] == len(runs[mine])
    with connection.cursor() as cursor:  # no tenant: nothing at all (fail closed)
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            assert cursor.fetchone() == (0,), table
    for table in TABLES:
        with pytest.raises(DatabaseError, match="row-level security"):
            _raw_insert(table, tenants[0].tenant_id, next(iter(runs[tenants[owners[0]].tenant_id])))
    for tenant in tenants:  # tidy up for the next example (same transaction), as each tenant
        with tenant_bind(tenant.tenant_id), connection.cursor() as cursor:
            for table in ("summaries", "approvals", "tool_operations", "agent_events", "agent_runs"):
                cursor.execute(f"DELETE FROM {table}")


def test_the_cross_tenant_functions_return_ids_tenants_and_counts_only(db):
    a, b = tenant_ensure(slug="rls-a"), tenant_ensure(slug="rls-b")
    run_a, run_b = _seed(a, 1), _seed(b, 2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s, true)", [TENANT_SETTING])
        assert (cursor.fetchone()[0] or "") == ""
        assert run_tenant(run_a) == a.tenant_id and run_tenant(run_b) == b.tenant_id
        assert run_tenant(uuid.uuid4()) is None
        cursor.execute("SELECT * FROM keeper_run_tenants()")
        assert [c.name for c in cursor.description] == ["tenant_id"]
        assert {row[0] for row in cursor.fetchall()} >= {a.tenant_id, b.tenant_id}
        cursor.execute("SELECT * FROM keeper_run_status_counts()")
        assert [c.name for c in cursor.description] == ["status", "runs"]
        assert dict(cursor.fetchall())["running"] >= 2
        cursor.execute("SELECT * FROM keeper_redispatch_claim(0, 100)")
        assert [c.name for c in cursor.description] == ["run_id", "tenant_id"]
        # Each is SECURITY DEFINER, owned by the owner (not the application role), search_path pinned,
        # and no function returns a column of content (state, payload, request, text...).
        cursor.execute(
            "SELECT p.proname, p.prosecdef, pg_get_userbyid(p.proowner), p.proconfig,"
            " pg_get_function_result(p.oid) FROM pg_proc p WHERE p.proname = ANY(%s)",
            [list(FUNCTIONS)],
        )
        found = {row[0]: row[1:] for row in cursor.fetchall()}
        cursor.execute("SELECT current_user")
        app = cursor.fetchone()[0]
    assert set(found) == set(FUNCTIONS)
    for name, (definer, owner, config, result) in found.items():
        assert definer and owner != app and any(c.startswith("search_path=") for c in config or []), name
        assert not any(word in result for word in ("state ", "payload", "request", "note", "json")), (
            name,
            result,
        )


def test_a_worker_sets_its_runs_tenant_for_the_task_and_gives_the_connection_back_without_it(db):
    tenant = tenant_ensure(slug="rls-worker")
    run_id = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run.run_id
    assert run_advance(run_id=run_id, worker_id="w").outcome == "committed"
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s, true)", [TENANT_SETTING])
        assert (cursor.fetchone()[0] or "") == ""
        cursor.execute("SELECT count(*) FROM agent_events")  # and so nothing is visible here
        assert cursor.fetchone() == (0,)
    with tenant_bind(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM agent_events WHERE run_id = %s", [run_id])
        assert cursor.fetchone()[0] >= 2
