"""GET /api/v1/runs/: a tenant's runs, newest activity first, in keyset pages with filters."""

from __future__ import annotations

import pytest

from runs.engine.runs import run_cancel, run_start
from runs.kernel.models import AgentRun
from tests.api.conftest import key_client

pytestmark = pytest.mark.django_db


def test_pages_walk_every_run_of_the_keys_tenant_once(tenant, other_tenant, read_key):
    mine = {
        str(run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run.run_id)
        for i in range(5)
    }
    run_start(tenant=other_tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t")
    api, seen, params = key_client(read_key), [], {"limit": 2}
    while True:
        page = api.get("/api/v1/runs/", params).json()
        seen += [r["run_id"] for r in page["results"]]
        assert len(page["results"]) <= 2 and "state" not in page["results"][0]
        if page["next"] is None:
            break
        params = {"limit": 2, **page["next"]}
    assert sorted(seen) == sorted(mine) and len(seen) == 5  # each once, none of the other tenant's


def test_filters_and_bad_input(tenant, read_key):
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
        for _ in range(3)
    ]
    run_cancel(run_id=runs[0].run_id, actor="t")
    api = key_client(read_key)
    cancelled = api.get("/api/v1/runs/", {"status": "cancelled"}).json()["results"]
    assert [r["run_id"] for r in cancelled] == [str(runs[0].run_id)]
    for bad in (
        {"status": "sleeping"},
        {"limit": 0},
        {"before_run_id": str(runs[0].run_id)},
        {"before_updated_at": "yesterday", "before_run_id": "x"},
        {"tenant": "globex"},
    ):
        response = api.get("/api/v1/runs/", bad)
        assert response.status_code in (400, 404) and "error" in response.json(), bad


def test_a_staff_session_lists_every_tenants_runs_or_the_one_it_names(
    tenant, other_tenant, client, django_user_model
):
    """The README: "Staff sessions see every tenant". A staff session without `tenant` used to get
    400 "tenant required"; now it pages through every tenant's runs, like the approvals list."""
    ours = {
        str(run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run.run_id)
        for i in range(3)
    }
    theirs = str(
        run_start(tenant=other_tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run.run_id
    )
    client.force_login(
        django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    )
    seen, params = {}, {"limit": 2}
    while True:
        response = client.get("/api/v1/runs/", params)
        assert response.status_code == 200, response.content
        page = response.json()
        seen.update({r["run_id"]: r["tenant"] for r in page["results"]})
        if page["next"] is None:
            break
        params = {"limit": 2, **page["next"]}
    assert seen == {**dict.fromkeys(ours, tenant.slug), theirs: other_tenant.slug}
    named = client.get("/api/v1/runs/", {"tenant": other_tenant.slug}).json()["results"]
    assert [r["run_id"] for r in named] == [theirs]
    assert client.get("/api/v1/runs/", {"tenant": "no-such-tenant"}).status_code == 404


def test_a_console_user_who_is_not_staff_is_told_what_the_api_takes(tenant):
    from rest_framework.test import APIClient

    from tests.console.conftest import make_user

    client = APIClient()
    client.force_login(make_user("sup", "support", tenants=(tenant,)))
    response = client.get("/api/v1/runs/")
    assert response.status_code == 403
    message = response.json()["error"]["message"]
    assert "not staff" in message and "API key" in message and "may only read" not in message


def _walk(api, order: str, during=None) -> list[str]:
    """Every page of the list in `order`, calling `during()` after the first page."""
    seen: list[str] = []
    params: dict[str, object] = {"limit": 2, "order": order}
    while True:
        page = api.get("/api/v1/runs/", params).json()
        seen += [r["run_id"] for r in page["results"]]
        if during is not None and len(seen) == 2:
            during()
        if page["next"] is None:
            return seen
        params = {"limit": 2, "order": order, **page["next"]}


def test_order_created_sees_every_run_once_while_runs_change_and_updated_may_not(tenant, read_key):
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run
        for i in range(6)
    ]
    ids = sorted(str(r.run_id) for r in runs)
    api = key_client(read_key)

    def oldest_changes():  # the runs not yet listed commit something: their updated_at moves to now
        for run in runs[:2]:
            run_cancel(run_id=run.run_id, actor="t")

    by_creation = _walk(api, "created", during=oldest_changes)
    assert sorted(by_creation) == ids and len(by_creation) == 6  # each once
    # The same walk by activity loses the runs that moved ahead of its cursor (why order=created exists).
    for run in runs[2:4]:
        run_cancel(run_id=run.run_id, actor="t")
    later = runs[4:]

    def newest_change():
        for run in later:
            run_cancel(run_id=run.run_id, actor="t")

    by_activity = _walk(api, "updated", during=newest_change)
    assert len(set(by_activity)) < 6


def test_a_cursor_of_the_other_order_is_refused(tenant, read_key):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    api = key_client(read_key)
    first = api.get("/api/v1/runs/", {"order": "created", "limit": 1}).json()
    assert first["next"] is None or set(first["next"]) == {
        "order",
        "cursor",
        "before_created_at",
        "before_run_id",
    }
    for bad in (
        {"order": "created", "before_updated_at": "2026-01-01T00:00:00Z", "before_run_id": str(run.run_id)},
        {"order": "updated", "before_created_at": "2026-01-01T00:00:00Z", "before_run_id": str(run.run_id)},
        {"order": "created", "before_created_at": "2026-01-01T00:00:00Z"},
        {"order": "oldest"},
    ):
        response = api.get("/api/v1/runs/", bad)
        assert response.status_code == 400 and "error" in response.json(), (bad, response.content)


def test_every_column_order_pages_with_its_cursor_and_a_bad_one_is_a_400_with_a_reason(tenant, read_key):
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run
        for i in range(5)
    ]
    for run, subject in zip(runs, ("bob", "ann", "", "bob", "ann"), strict=True):
        AgentRun.objects.filter(run_id=run.run_id).update(subject=subject)
    run_cancel(run_id=runs[1].run_id, actor="t")
    api = key_client(read_key)
    rows = sorted((r.subject, str(r.run_id)) for r in AgentRun.objects.all())
    assert _walk(api, "subject") == [run_id for _, run_id in rows]
    assert _walk(api, "subject_desc") == [run_id for _, run_id in rows[::-1]]
    statuses = sorted((r.status, str(r.run_id)) for r in AgentRun.objects.all())
    assert _walk(api, "status") == [run_id for _, run_id in statuses]
    first = api.get("/api/v1/runs/", {"order": "subject", "limit": 2}).json()
    assert set(first["next"]) == {"order", "cursor"}
    for bad, reason in (
        ({"order": "subject", "cursor": "garbage"}, "not one this list made"),
        ({"order": "subject_desc", "cursor": first["next"]["cursor"]}, "belongs to another order"),
        ({"order": "updated", "cursor": first["next"]["cursor"]}, "belongs to another order"),
        ({"order": "colour"}, "not a valid choice"),
    ):
        response = api.get("/api/v1/runs/", bad)
        assert response.status_code == 400 and reason in response.content.decode(), (bad, response.content)
