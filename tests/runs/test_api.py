"""The runs API: idempotent start, reads, transitions, and clear 4xx errors for bad input."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from runs.kernel.models import AgentEvent, AgentRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    client = APIClient()
    staff = get_user_model().objects.create_user(
        "ops", password="pw-for-tests", is_staff=True, is_superuser=True
    )
    client.force_authenticate(staff)
    return client


def test_start_is_idempotent_by_header(api, tenant):
    body = {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 2}}
    first = api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    other = api.post("/api/v1/runs/", {**body, "input": {"n": 3}}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert AgentRun.objects.count() == 1


@pytest.mark.parametrize("key", ["langgraph:t-1", "child:x:y", "schedule:s:2026-01-01T00:00:00Z"])
def test_a_client_cannot_start_a_run_under_keepers_own_keys(api, tenant, key):
    """A run under "langgraph:<thread>" would take that LangGraph thread's place (the graph's saver then
    found a finished countdown where its thread should be)."""
    body = {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 2}}
    answer = api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "reserved_idempotency_key"
    assert AgentRun.objects.count() == 0
    assert api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY=f"my-{key}").status_code == 201


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"tenant": "acme", "workflow": "nope", "input": {}}, 422, "unknown_workflow"),
        ({"tenant": "nobody", "workflow": "demo.countdown", "input": {"n": 1}}, 404, "unknown_tenant"),
        ({"tenant": "acme", "workflow": "demo.countdown", "input": [1]}, 422, "invalid_state"),
        ({"tenant": "acme", "workflow": "demo.countdown", "input": {"n": -1}}, 422, "invalid_input"),
        ({"tenant": "acme", "workflow": "demo.countdown"}, 400, "invalid_input"),
    ],
)
def test_bad_requests_get_a_reason_not_a_500(api, tenant, body, status, code):
    response = api.post("/api/v1/runs/", body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert AgentRun.objects.count() == 0


def test_read_run_and_page_through_events(api, tenant):
    run_id = api.post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 1}}, format="json"
    ).json()["run_id"]
    from runs.engine.steps import run_advance

    while run_advance(run_id=uuid.UUID(run_id), worker_id="w").outcome == "committed":
        pass
    detail = api.get(f"/api/v1/runs/{run_id}/").json()
    assert detail["status"] == "completed" and detail["state_revision"] == 4
    page = api.get(f"/api/v1/runs/{run_id}/events/?after_seq=1&limit=2").json()
    assert [e["seq"] for e in page["results"]] == [2, 3] and page["next_after_seq"] == 3
    assert api.get(f"/api/v1/runs/{run_id}/events/?after_seq=-5").status_code == 400
    assert api.get(f"/api/v1/runs/{uuid.uuid4()}/").json()["error"]["code"] == "run_not_found"


def _finished(api, n=2):
    from runs.engine.steps import run_advance

    run_id = api.post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": n}}, format="json"
    ).json()["run_id"]
    while run_advance(run_id=uuid.UUID(run_id), worker_id="w").outcome == "committed":
        pass
    return run_id


def test_a_fork_or_rewind_sent_twice_with_a_key_makes_one_run(api, tenant):
    """A retried fork (a client's timeout, a double click) made a second run for every try."""
    run_id = _finished(api)
    fork = f"/api/v1/runs/{run_id}/fork"
    first = api.post(fork, {"at_seq": 2, "start": False}, format="json", HTTP_IDEMPOTENCY_KEY="f-1")
    again = api.post(fork, {"at_seq": 2, "start": False}, format="json", HTTP_IDEMPOTENCY_KEY="f-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    other = api.post(fork, {"at_seq": 1}, format="json", HTTP_IDEMPOTENCY_KEY="f-1")
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert api.post(fork, {"at_seq": 2}, format="json").status_code == 201  # no key: a fork each time
    assert AgentRun.objects.filter(parent_run_id=run_id).count() == 2
    reserved = api.post(
        "/api/v1/runs/",
        {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 1}},
        format="json",
        HTTP_IDEMPOTENCY_KEY="fork:f-1",
    )
    assert reserved.status_code == 422 and reserved.json()["error"]["code"] == "reserved_idempotency_key"

    rewind = f"/api/v1/runs/{run_id}/rewind"
    first = api.post(rewind, {"to_seq": 2}, format="json", HTTP_IDEMPOTENCY_KEY="r-1")
    again = api.post(rewind, {"to_seq": 2}, format="json", HTTP_IDEMPOTENCY_KEY="r-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    assert AgentRun.objects.get(run_id=run_id).superseded_by_id == uuid.UUID(first.json()["run_id"])
    assert AgentEvent.objects.filter(run_id=run_id, event_type="run_superseded").count() == 1
    # Without the key, or with another one, a second rewind is refused: the run is superseded.
    refused = api.post(rewind, {"to_seq": 2}, format="json", HTTP_IDEMPOTENCY_KEY="r-2")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "invalid_transition"
    # The fork's key names a fork, not this rewind.
    used = api.post(rewind, {"to_seq": 2}, format="json", HTTP_IDEMPOTENCY_KEY="f-1")
    assert used.status_code == 409 and used.json()["error"]["code"] == "idempotency_key_reused"
    assert AgentRun.objects.filter(parent_run_id=run_id).count() == 3


def test_cancel_then_resume_is_refused_with_409(api, tenant):
    run_id = api.post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 1}}, format="json"
    ).json()["run_id"]
    cancelled = api.post(f"/api/v1/runs/{run_id}/cancel", {"note": "duplicate request"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    refused = api.post(f"/api/v1/runs/{run_id}/resume", {}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "invalid_transition"


def test_the_api_requires_a_staff_user(tenant):
    response = APIClient().post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {}}, format="json"
    )
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"  # no session, no key
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("pat", password="pw-for-tests"))
    response = client.post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {}}, format="json"
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"
    assert AgentRun.objects.count() == 0


def test_a_resume_request_shows_on_the_run_until_a_worker_verifies_it(api, tenant):
    """The README says a resumed run stays suspended with resume_requested_at set: the API shows it."""
    from runs.engine.runs import run_suspend

    run_id = api.post(
        "/api/v1/runs/", {"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 1}}, format="json"
    ).json()["run_id"]
    assert api.get(f"/api/v1/runs/{run_id}/").json()["resume_requested_at"] is None
    run_suspend(run_id=uuid.UUID(run_id), reason="paused", detail="by a test", actor="test")
    resumed = api.post(f"/api/v1/runs/{run_id}/resume", {"note": "go on"}, format="json")
    assert resumed.status_code == 200, resumed.content
    shown = api.get(f"/api/v1/runs/{run_id}/").json()
    assert shown["status"] == "suspended" and shown["resume_requested_at"] is not None
    listed = api.get("/api/v1/runs/?tenant=acme").json()["results"]
    assert [r["resume_requested_at"] is not None for r in listed if r["run_id"] == run_id] == [True]
    # Ten clicks are one request, not ten. Asked again before a worker verified the
    # first, it is a 409 saying who asked, and nothing is written.
    again = api.post(f"/api/v1/runs/{run_id}/resume", {"note": "go on!"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "resume_pending", again.content
    assert "already asked it to resume" in again.json()["error"]["message"]
    assert AgentEvent.objects.filter(run_id=run_id, event_type="resume_requested").count() == 1


def test_start_run_refuses_keepers_own_keys_too(tenant):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="reserved_idempotency_key"):
        call_command(
            "start_run",
            "demo.countdown",
            "--input",
            '{"n": 1}',
            "--tenant",
            "acme",
            "--idempotency-key",
            "langgraph:t",
        )
    assert AgentRun.objects.count() == 0


def test_an_id_in_upper_case_names_the_same_run(api, tenant):
    """A UUID from another system's tools (upper case) was "no API endpoint"."""
    run_id = _finished(api)
    upper = run_id.upper()
    assert api.get(f"/api/v1/runs/{upper}/").json()["run_id"] == run_id
    assert api.get(f"/api/v1/runs/{upper}/events/?limit=1").json()["results"][0]["seq"] == 1
    forked = api.post(f"/api/v1/runs/{upper}/fork", {"at_seq": 1, "start": False}, format="json")
    assert forked.status_code == 201 and forked.json()["parent_run_id"] == run_id
    missing = api.get(f"/api/v1/runs/{str(uuid.uuid4()).upper()}/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
    unknown = api.get(f"/api/v1/nothing/{upper}/")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
