"""Signals reach external runs: the registration declares them, a worker waits for one by
suspending with reason `signal`, the signal wakes the run, and the next claim hands it over."""

from __future__ import annotations

import pytest

from runs.kernel.models import AgentEvent, AgentRun
from tests.runs.external.conftest import REFUND

pytestmark = pytest.mark.django_db

SHIPPING = {**REFUND, "name": "ext.shipping", "steps": ["wait", "done"], "signals": ["shipped"]}


def _claim(api):
    return api.post("/api/v1/workers/claim", {"workflows": ["ext.shipping"]}, format="json")


def _signal(api, run_id: str, name: str, payload: object, key: str):
    return api.post(f"/api/v1/runs/{run_id}/signals/{name}", payload, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_an_external_run_waits_for_a_declared_signal_and_gets_it_on_the_next_claim(api):
    registered = api.post("/api/v1/workflows/external/", SHIPPING, format="json")
    assert registered.status_code == 201 and registered.json()["signals"] == ["shipped"]
    run_id = api.post(
        "/api/v1/runs/", {"workflow": "ext.shipping", "input": {"order_id": "o-9"}}, format="json"
    ).json()["run_id"]
    c = _claim(api).json()
    assert c["signals"] == []
    waiting = api.post(
        f"/api/v1/workers/runs/{run_id}/commit",
        {
            "lease_token": c["lease_token"],
            "expected_revision": c["revision"],
            "state": c["state"],
            "suspend": {"reason": "signal", "detail": "waiting for signal shipped"},
        },
        format="json",
    )
    assert waiting.status_code == 200, waiting.content
    assert _claim(api).status_code == 204  # it waits: nothing to claim

    unknown = _signal(api, run_id, "delivered", {"at": "door"}, "k-0")
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_signal"
    assert unknown.json()["error"]["details"]["accepted"] == ["shipped"]
    sent = _signal(api, run_id, "shipped", {"tracking": "<script>x</script>"}, "k-1")
    assert sent.status_code == 201, sent.content
    assert _signal(api, run_id, "shipped", {"tracking": "<script>x</script>"}, "k-1").status_code == 200
    assert AgentEvent.objects.filter(run_id=run_id, event_type="signal_received").count() == 1

    c = _claim(api).json()  # the signal woke the run: a worker gets it with the signal
    assert c["step"] == "wait" and c["verified"] == "resume_request"
    assert [(s["signal"], s["payload"]) for s in c["signals"]] == [
        ("shipped", {"tracking": "<script>x</script>"})
    ]
    done = api.post(
        f"/api/v1/workers/runs/{run_id}/commit",
        {
            "lease_token": c["lease_token"],
            "expected_revision": c["revision"],
            "state": {**c["state"], "seen_signal": c["signals"][-1]["seq"]},
            "complete": {"result": {"shipped": True}},
        },
        format="json",
    )
    assert done.status_code == 200, done.content
    assert AgentRun.objects.get(run_id=run_id).status == "completed"
    late = _signal(api, run_id, "shipped", {}, "k-2")
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_finished"


def test_a_registration_with_a_bad_signal_name_is_refused_and_stores_nothing(api):
    bad = api.post(
        "/api/v1/workflows/external/", {**SHIPPING, "signals": ["no spaces allowed"]}, format="json"
    )
    assert bad.status_code == 422, bad.content
    assert api.get("/api/v1/workflows/external/").json() == []
