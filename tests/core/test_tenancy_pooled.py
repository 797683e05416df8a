"""The tenant behind PgBouncer in transaction mode (tests.pooling: a pool of three, round robin):
each statement of a task bound to its tenant sees that tenant's rows and writes them, and no server
connection keeps a tenant for the next client."""

from __future__ import annotations

import psycopg
import pytest

from core.processes import current_database_url
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.runs import run_start
from runs.kernel.models import AgentRun
from tests.pooling import POOL_SIZE, pooled_connection

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def acme(transactional_db):
    """Acme with three runs, written straight to PostgreSQL and bound only while writing: a binding
    still open on the direct connection would stand for the pooled one when Python reuses the closed
    connection's id (core.tenancy's shortcut compares ids), and tenant_bind would then set nothing."""
    tenant = tenant_ensure(slug="acme", name="Acme")
    with tenant_bind(tenant.tenant_id):
        for _ in range(3):
            run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test")
    return tenant


def _fresh_client_counts(url: str, table: str) -> list[int]:
    """What a client that never set a tenant sees, statement after statement (each on the next server
    connection of the pool)."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as fresh:
        return [fresh.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for _ in range(2 * POOL_SIZE)]  # type: ignore[index]


def test_a_client_that_never_set_a_tenant_sees_nothing_after_a_task_bound_one(acme, pgbouncer):
    direct = current_database_url()
    with pooled_connection(pgbouncer):
        # Tasks of 1, 2 and 3 statements, bound to their run's tenant as a worker's task is: whatever
        # the pool's rotation, a binding that lives on a server connection is left on one of them.
        for statements in range(1, POOL_SIZE + 1):
            with tenant_bind(acme.tenant_id):
                for _ in range(statements):
                    AgentRun.objects.filter(tenant=acme).count()
        assert _fresh_client_counts(pgbouncer.url(direct), "agent_runs") == [0] * (2 * POOL_SIZE)


def test_every_statement_of_a_bound_task_reads_and_writes_its_tenants_rows(acme, pgbouncer):
    globex = tenant_ensure(slug="globex", name="Globex")
    with pooled_connection(pgbouncer), tenant_bind(globex.tenant_id):
        started = [
            run_start(tenant=globex, workflow_name="demo.countdown", input={"n": 1}, actor="test").run.run_id
            for _ in range(POOL_SIZE)
        ]
        counts = [AgentRun.objects.count() for _ in range(2 * POOL_SIZE)]
        found = [AgentRun.objects.filter(run_id=run_id).exists() for run_id in started * 2]
    assert counts == [POOL_SIZE] * (2 * POOL_SIZE)  # its own runs, in every statement, and none of acme's
    assert all(found)
