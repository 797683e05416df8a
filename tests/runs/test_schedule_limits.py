"""A tenant's schedules are bounded in number and in how often each may fire: 20 one-second schedules
started 160 runs in 40 s from 20 API calls."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from runs.engine.schedule_models import WorkflowSchedule

pytestmark = pytest.mark.django_db


def _client(tenant) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='t', scope='write').plaintext}"
    )
    return client


def _schedule(api, **timing):
    body = {"workflow": "demo.countdown", "input": {"n": 1}, **(timing or {"interval_seconds": 3600})}
    return api.post("/api/v1/schedules/", body, format="json")


def test_a_tenant_has_at_most_its_quota_of_schedules(tenant, other_tenant, settings):
    settings.KEEPER_SCHEDULES_PER_TENANT = 3
    api = _client(tenant)
    made = [_schedule(api), _schedule(api, cron="0 * * * *"), _schedule(api)]
    assert [r.status_code for r in made] == [201] * 3, made[-1].content
    assert api.patch(f"/api/v1/schedules/{made[0].json()['schedule_id']}/", {"enabled": False}, format="json")
    refused = _schedule(api)  # a paused schedule counts
    assert refused.status_code == 422, refused.content
    error = refused.json()["error"]
    assert error["code"] == "schedule_quota_exceeded" and error["details"] == {"quota": 3}
    assert "KEEPER_SCHEDULES_PER_TENANT" in error["message"]
    assert WorkflowSchedule.objects.filter(tenant=tenant).count() == 3
    assert _schedule(_client(other_tenant)).status_code == 201  # each tenant has its own
    assert api.delete(f"/api/v1/schedules/{made[1].json()['schedule_id']}/").status_code == 204
    assert _schedule(api).status_code == 201


def test_an_interval_below_the_minimum_is_refused_on_create_and_on_change(tenant, settings):
    settings.KEEPER_SCHEDULE_MIN_INTERVAL = 60
    api = _client(tenant)
    for seconds in (1, 59):
        refused = _schedule(api, interval_seconds=seconds)
        assert refused.status_code == 422, refused.content
        error = refused.json()["error"]
        assert error["code"] == "invalid_interval" and error["details"]["minimum"] == 60
        assert "KEEPER_SCHEDULE_MIN_INTERVAL" in error["message"]
    made = _schedule(api, interval_seconds=60)
    assert made.status_code == 201, made.content
    url = f"/api/v1/schedules/{made.json()['schedule_id']}/"
    changed = api.patch(url, {"interval_seconds": 1}, format="json")
    assert changed.status_code == 422 and changed.json()["error"]["code"] == "invalid_interval"
    assert WorkflowSchedule.objects.get().interval_seconds == 60
    assert _schedule(api, cron="* * * * *").status_code == 201  # a cron fires at most once a minute
