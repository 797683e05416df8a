"""Every statement on a table Citus would distribute by tenant_id names the tenant in its own predicate
(core/db/distribution.py; docs/explanation/past-one-primary.md): recorded from a representative
workload (a run stepped by the kernel's Celery driver, the REST API, console pages, memory and
retrieval) and read statically from the kernel's SQL and PL/pgSQL. A statement without one could not
be routed to its tenant's shard; row-level security alone would hide the rows, not find the node.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.db import wire
from core.db.distribution import COORDINATOR, DISTRIBUTED, REFERENCE
from runs.engine.steps import run_advance
from runs.kernel._sql import langgraph, leases, partitions, runs, template
from runs.kernel.functions import function_sources
from tests.console.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = re.compile(r'\b(?:FROM|JOIN|UPDATE|INTO)\s+(?:ONLY\s+)?(?:"?public"?\.)?"?([a-z_]+)"?', re.I)
# tenant_id compared with something: `"t"."tenant_id" = %s`, `tenant_id = ANY(...)`, `x.tenant_id = u.tenant_id`
PREDICATE = re.compile(r'tenant_id"?\s*(?:=|IN\s*\(|<>)|(?:=|IN\s*\()\s*[\w".]*tenant_id\b', re.I)
INSERT_WITH_TENANT = re.compile(r"\bINSERT\s+INTO\s+\S+\s*\([^)]*\btenant_id\b[^)]*\)\s*VALUES", re.I)

# Statements that reach every tenant's shard by design, each with why. On Citus they run as
# multi-shard statements (or per node), never on a request's path.
EXEMPT: dict[str, str] = {
    "keeper_redispatch_claim": "the sweep looks for lost runs across tenants and returns only ids and tenants",
    "keeper_code_back_claim": "the sweep across tenants for runs whose code came back; ids and tenants only",
    "keeper_langgraph_answered_claim": "the sweep across tenants for answered threads; ids and tenants only",
    "keeper_events_partition_drop": "retention reads every tenant's runs of a month before dropping it",
    "keeper_events_partitions_ensure": "maintenance of partitions, not a tenant's rows",
    "keeper_partition_drop": "retention reads every tenant's runs, or pending deliveries, of a month before dropping it",
    "keeper_partitions_ensure": "maintenance of partitions (rows move from the default one whole), not a tenant's rows",
    "keeper_agent_event_rewritten": "a trigger on the row being updated: the update's own predicate routes it",
    "keeper_approvals_close": "a trigger on the run's row: it closes that run's approvals (co-located)",
}


def _distributed(sql: str) -> set[str]:
    return {t.lower() for t in TABLES.findall(sql)} & DISTRIBUTED


def unrouted(sql: str) -> bool:
    """Touches a distributed table and names no tenant in a predicate (nor inserts one value row)."""
    if not _distributed(sql):
        return False
    if INSERT_WITH_TENANT.search(sql):
        return False
    return not PREDICATE.search(sql)


def test_the_classification_covers_every_tenant_table():
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT DISTINCT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE a.attname = 'tenant_id' AND NOT a.attisdropped AND n.nspname = 'public'
                 AND c.relkind IN ('r', 'p') AND NOT c.relispartition"""
        )
        tenant_tables = {row[0] for row in cursor.fetchall()}
    assert tenant_tables - (DISTRIBUTED | REFERENCE | COORDINATOR) == set()
    assert not (DISTRIBUTED & REFERENCE) and not (DISTRIBUTED & COORDINATOR)


def test_the_check_tells_a_routed_statement_from_one_that_is_not():
    assert unrouted('SELECT * FROM "agent_events" WHERE "agent_events"."run_id" = %s')
    assert not unrouted(
        'SELECT * FROM "agent_events" WHERE ("run_id" = %s AND "agent_events"."tenant_id" = %s)'
    )
    assert not unrouted("INSERT INTO memory_items (tenant_id, key) VALUES (%s, %s)")
    assert not unrouted("SELECT 1 FROM tenants WHERE slug = %s")  # a reference table


def _kernel_statements() -> dict[str, str]:
    found = {}
    for module in (runs, leases, langgraph, partitions, template):
        for name, value in vars(module).items():
            sql = value.sql.decode() if isinstance(value, wire.Statement) else value
            if isinstance(sql, str) and _distributed(sql) and not name.startswith("_"):
                found[f"{module.__name__}.{name}"] = sql
    return found


def test_the_kernels_statements_name_the_tenant():
    statements = _kernel_statements()
    assert "runs.kernel._sql.runs.INSERT_RUN" in statements
    missing = sorted(name for name, sql in statements.items() if unrouted(sql))
    assert missing == [], "name the tenant (tenant_id = ...) in: " + ", ".join(missing)


def test_the_databases_functions_name_the_tenant():
    missing = []
    for name, source in function_sources().items():
        if name in EXEMPT:
            continue
        body = re.sub(r"--[^\n]*", "", source.split("$function$")[1])  # a comment may hold a ";"
        for statement in body.split(";"):
            if unrouted(statement):
                missing.append(f"{name}: {' '.join(statement.split())[:160]}")
    assert missing == [], "\n".join(missing)


@contextmanager
def _recorded() -> Iterator[list[str]]:
    seen: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def test_a_representative_workload_names_the_tenant_in_every_statement(database_path, tenant):
    """Straight on PostgreSQL and through PgBouncer in transaction mode (where the step commit runs
    through its function and nothing is prepared)."""
    key = api_key_create(tenant=tenant, name="ci", scope="write").plaintext
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    staff = APIClient()
    staff.force_authenticate(
        get_user_model().objects.create_user("kb", password="pw-kb-0001", is_staff=True, is_superuser=True)
    )
    console = Client()
    console.force_login(make_user("eng", "engineer", tenants=(tenant,)))
    with _recorded() as seen:
        started = api.post(
            "/api/v1/runs/", {"workflow": "conversation", "input": {}, "subject": "c-9"}, format="json"
        )
        assert started.status_code == 201, started.json()
        run_id = started.json()["run_id"]
        sent = api.post(
            f"/api/v1/runs/{run_id}/messages/",
            {"type": "user_message", "client_message_id": "m-1", "content": "Where is order ord-3?"},
            format="json",
        )
        assert sent.status_code in (200, 201), sent.json()
        for _ in range(4):
            if run_advance(run_id=run_id).outcome != "committed":
                break
        for path in ("", "events/", "context/", "operations/"):
            assert api.get(f"/api/v1/runs/{run_id}/{path}").status_code == 200, path
        assert api.get("/api/v1/runs/").status_code == 200
        remembered = api.post(
            "/api/v1/memory/items/",
            {
                "subject_id": "c-9",
                "namespace": "profile",
                "key": "city",
                "value": "Porto",
                "provenance": {
                    "source_type": "user_statement",
                    "source_id": f"run:{run_id}",
                    "source_version": "1",
                    "run_id": run_id,
                    "event_seq": 2,
                    "validation_method": "user_statement",
                },
            },
            format="json",
        )
        assert remembered.status_code in (201, 202, 403), remembered.json()
        assert (
            api.post(
                "/api/v1/memory/search/", {"subject_id": "c-9", "query": "city"}, format="json"
            ).status_code
            == 200
        )
        document = {
            "tenant": tenant.slug,
            "document_id": "policy-1",
            "source_uri": "s3://kb/policy-1.md",
            "source_version": "etag:1",
            "media_type": "text/markdown",
            "acl": ["group:support"],
            "text": "# Refunds\n\nRefunds are paid within 14 days.",
            "wait": True,
        }
        assert staff.post("/api/v1/retrieval/documents/", document, format="json").status_code == 201
        staff.post(
            "/api/v1/retrieval/principals/",
            {"tenant": tenant.slug, "principal": "user:ann", "groups": ["group:support"]},
            format="json",
        )
        found = staff.post(
            "/api/v1/retrieval/search/",
            {"tenant": tenant.slug, "principal": "user:ann", "query": "refunds"},
            format="json",
        )
        assert found.status_code == 200
        assert api.post(f"/api/v1/runs/{run_id}/cancel", {}, format="json").status_code in (200, 202)
        for page in (reverse("console:run_detail", args=[run_id]), reverse("console:run_list")):
            assert console.get(page).status_code == 200, page
    unrouted_seen = sorted({" ".join(sql.split())[:200] for sql in seen if unrouted(sql)})
    assert len(seen) > 100
    assert unrouted_seen == [], (
        f"{len(unrouted_seen)} statement(s) on distributed tables without a tenant predicate:\n"
        + "\n".join(unrouted_seen)
    )
