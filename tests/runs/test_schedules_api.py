"""The schedules API (/api/v1/schedules/) and the workflows API (/api/v1/workflows/) with API keys."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from runs.engine.runs import run_start
from runs.engine.schedule_models import WorkflowSchedule


def _client(tenant) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='t', scope='write').plaintext}"
    )
    return client


@pytest.fixture
def api(tenant) -> APIClient:
    return _client(tenant)


def test_create_read_pause_resume_and_delete_a_schedule(api):
    body = {"workflow": "demo.countdown", "cron": "*/10 * * * *", "input": {"n": 2}, "overlap": "queue"}
    created = api.post("/api/v1/schedules/", body, format="json")
    assert created.status_code == 201, created.content
    schedule = created.json()
    assert (schedule["cron"], schedule["overlap"], schedule["enabled"], schedule["tenant"]) == (
        "*/10 * * * *",
        "queue",
        True,
        "acme",
    )
    assert schedule["next_fire_at"].endswith(("0:00Z", "0:00+00:00"))
    url = f"/api/v1/schedules/{schedule['schedule_id']}/"
    assert api.get(url).json()["schedule_id"] == schedule["schedule_id"]
    assert [s["schedule_id"] for s in api.get("/api/v1/schedules/").json()] == [schedule["schedule_id"]]
    paused = api.patch(url, {"enabled": False}, format="json")
    assert paused.status_code == 200 and paused.json()["enabled"] is False
    resumed = api.patch(url, {"enabled": True, "interval_seconds": 30}, format="json")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["enabled"] is True and resumed.json()["interval_seconds"] == 30
    assert resumed.json()["cron"] == ""
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert not WorkflowSchedule.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"workflow": "demo.countdown", "cron": "61 * * * *", "input": {"n": 1}}, 422, "invalid_cron"),
        ({"workflow": "demo.countdown", "cron": "every day", "input": {"n": 1}}, 422, "invalid_cron"),
        ({"workflow": "demo.countdown", "interval_seconds": 0, "input": {"n": 1}}, 422, "invalid_interval"),
        ({"workflow": "demo.countdown", "interval_seconds": -1, "input": {"n": 1}}, 422, "invalid_interval"),
        ({"workflow": "nope", "interval_seconds": 60, "input": {}}, 422, "unknown_workflow"),
        ({"workflow": "demo.countdown", "interval_seconds": 60, "input": {"n": "x"}}, 422, "invalid_input"),
        ({"workflow": "demo.countdown", "input": {"n": 1}}, 422, "invalid_schedule"),
        ({"workflow": "demo.countdown", "interval_seconds": "soon", "input": {"n": 1}}, 400, "invalid_input"),
        (
            {"workflow": "demo.countdown", "interval_seconds": 60, "input": {"n": 1}, "overlap": "x"},
            422,
            "invalid_overlap",
        ),
    ],
)
def test_bad_schedules_get_a_reason_and_nothing_is_stored(api, body, status, code):
    response = api.post("/api/v1/schedules/", body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert not WorkflowSchedule.objects.exists()


def test_a_bad_change_is_refused_and_the_schedule_stays_as_it_was(api):
    created = api.post(
        "/api/v1/schedules/",
        {"workflow": "demo.countdown", "interval_seconds": 60, "input": {"n": 1}},
        format="json",
    ).json()
    url = f"/api/v1/schedules/{created['schedule_id']}/"
    for change, code in (
        ({"cron": "0 0 31 2 *"}, "invalid_cron"),
        ({"input": {"n": -3}}, "invalid_input"),
        ({"input": {"n": 1, "budgets": {"steps": "x"}}}, "invalid_budgets"),
    ):
        response = api.patch(url, change, format="json")
        assert response.status_code == 422 and response.json()["error"]["code"] == code
    # A misspelt field is refused, not answered 200 changing nothing.
    misspelt = api.patch(url, {"enable": False}, format="json")
    assert misspelt.status_code == 400 and "enable" in misspelt.json()["error"]["details"], misspelt.content
    assert api.get(url).json()["enabled"] is True
    created = api.post(
        "/api/v1/schedules/",
        {"workflow": "demo.countdown", "interval_seconds": 60, "input": {"n": 1}, "enable": False},
        format="json",
    )
    assert created.status_code == 400 and "enable" in created.json()["error"]["details"]
    after = api.get(url).json()
    assert (after["interval_seconds"], after["cron"], after["input"]) == (60, "", {"n": 1})


def test_another_tenants_key_does_not_see_or_touch_a_schedule(api, other_tenant):
    created = api.post(
        "/api/v1/schedules/",
        {"workflow": "demo.countdown", "interval_seconds": 60, "input": {"n": 1}},
        format="json",
    ).json()
    other = _client(other_tenant)
    url = f"/api/v1/schedules/{created['schedule_id']}/"
    assert other.get("/api/v1/schedules/").json() == []
    assert other.get(url).status_code == 404
    assert other.patch(url, {"enabled": False}, format="json").status_code == 404
    assert other.delete(url).status_code == 404
    assert api.get(url).json()["enabled"] is True


def test_the_workflows_api_lists_versions_with_their_runs_and_drain(api, tenant):
    run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t")
    workflows = {w["name"]: w for w in api.get("/api/v1/workflows/").json()}
    [version] = workflows["demo.countdown"]["versions"]
    assert version["runs"] == {"running": 1} and version["newest"] and not version["safe_to_remove"]
    assert version["registered"] and version["active"] == 1 and len(version["holding_run_ids"]) == 1
