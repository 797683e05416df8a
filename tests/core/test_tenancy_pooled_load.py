"""Two tenants under concurrent load, through PgBouncer in transaction mode (pool of 3, round robin)
and, side by side in the same test, straight on PostgreSQL: the same Keeper processes (gunicorn 2 x 4
threads, a worker of 4 threads, beat), API clients and console users per tenant (tests.load). Both
must give 0 leaks, 0 missing own objects, 0 errors, no row for a client that never set a tenant, and
every run started finished."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from console.models import Membership
from core.api_auth import api_key_create
from core.processes import current_database_url
from core.tenancy import tenant_bind, tenant_ensure
from memory.projection import memory_project
from memory.services import memory_remember
from runs.engine.runs import run_start
from runs.external.workflows import external_workflow_register
from tests.load import TenantSide, deploy, run_load
from tests.memory.test_memory import said
from tests.pooling import POOL_SIZE, pooled_env
from tests.processes import flush_redis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLIENTS = 4  # API clients per tenant, besides one console user each
LOAD_SECONDS = 20.0
DRAIN_SECONDS = 40.0  # after the load, for the last runs to finish
LANGUAGES = {"acme": "speaks German", "globex": "speaks French"}


def _side(slug: str) -> TenantSide:
    """A tenant with a write key, an external workflow, a claim about subject c-1, a run (so its run
    list is never empty) and an engineer signed in to the console."""
    tenant = tenant_ensure(slug=slug, name=slug.title())
    with tenant_bind(tenant.tenant_id):
        key = api_key_create(tenant=tenant, name="load", scope="write").plaintext
        workflow = f"ext.{slug}.load"
        external_workflow_register(tenant=tenant, name=workflow, version="1", steps=["a"], actor="load")
        memory_remember(
            tenant=tenant,
            subject_id="c-1",
            namespace="profile",
            key="language",
            value=LANGUAGES[slug],
            provenance=said(),
        )
        memory_project(tenant=tenant)
        seeded = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="load").run
    engineer = get_user_model().objects.create_user(f"{slug}-load-engineer", password="pw-load-engineer-1")
    engineer.groups.add(Group.objects.get_or_create(name="engineer")[0])
    with tenant_bind(tenant.tenant_id):  # memberships are under row-level security
        Membership.objects.create(user=engineer, tenant=tenant)
    browser = Client()
    browser.force_login(engineer)
    side = TenantSide(
        slug=slug,
        key=key,
        console_cookie=browser.cookies[settings.SESSION_COOKIE_NAME].value,
        workflow=workflow,
        memory_value=LANGUAGES[slug],
    )
    side.started(str(seeded.run_id))
    return side


def _table(figures: dict[str, dict]) -> str:
    keys = [
        "requests",
        "leaks",
        "missing",
        "errors",
        "unexpected",
        "fresh_client_rows",
        "runs_started",
        "runs_finished",
        "seconds",
    ]
    lines = [f"{'':>18}" + "".join(f"{path:>12}" for path in figures)]
    lines += [f"{key:>18}" + "".join(f"{figures[p][key]:>12}" for p in figures) for key in keys]
    for path, f in figures.items():
        if f["unfinished"] or f["examples"]:
            lines.append(
                f"{path}: unfinished {f['unfinished']}; examples {json.dumps(f['examples'], indent=1)}"
            )
    return "\n".join(lines)


def test_two_tenants_under_load_through_pgbouncer_see_only_their_own_as_straight_on_postgresql(
    transactional_db, pgbouncer, processes
):
    sides = {slug: _side(slug) for slug in LANGUAGES}
    direct = current_database_url()
    figures: dict[str, dict] = {}
    try:
        for path, url, env in (("direct", direct, {}), ("pgbouncer", pgbouncer.url(direct), pooled_env())):
            deployment = deploy(processes, database_url=url, env=env)
            figures[path] = run_load(
                deployment,
                sides,
                clients=CLIENTS,
                seconds=LOAD_SECONDS,
                drain_seconds=DRAIN_SECONDS,
                cookie_name=settings.SESSION_COOKIE_NAME,
                fresh_statements=2 * POOL_SIZE,
            )
            processes.kill_all()
            flush_redis()
    finally:
        pgbouncer.renew(pgbouncer.url(direct))
    report = _table(figures)
    print(report)
    for path, f in figures.items():
        assert f["runs_started"] > 0 and f["requests"] > 50, (path, report)
        assert (f["leaks"], f["fresh_client_rows"], f["missing"], f["errors"], f["unexpected"]) == (
            0,
            0,
            0,
            0,
            0,
        ), f"{path}:\n{report}"
        assert f["runs_finished"] == f["runs_started"], f"{path}:\n{report}"
