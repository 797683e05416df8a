"""Every body of the worker protocol takes only its own fields, and a lease token outside ASCII is a
403 with its reason: the commit took {"bogus_field": 1} (200), and a non-ASCII token was a 500 (an
HTML page, in production too)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from runs.kernel.models import AgentEvent, AgentRun, ToolOperation

pytestmark = pytest.mark.django_db


@pytest.fixture
def claimed(api, workflow) -> dict[str, Any]:
    started = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-1"}}, format="json"
    )
    assert started.status_code == 201, started.content
    claim = api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json")
    assert claim.status_code == 200, claim.content
    return claim.json()


def _bodies(claim: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A body each lease route takes, by route below workers/runs/<id>/."""
    token = claim["lease_token"]
    commit = {"lease_token": token, "expected_revision": claim["revision"], "state": claim["state"]}
    return {
        "commit": {**commit, "next_step": "refund"},
        "heartbeat": {"lease_token": token},
        "release": {"lease_token": token, "retry_in": 0},
        "approval": {"lease_token": token, "request": {"order_id": "o-1"}},
        "operations/prepare": {
            "lease_token": token,
            "operation_id": "refund:o-1",
            "tool_name": "payments.refund",
            "tool_contract_version": "payments.v1",
            "request": {"order_id": "o-1"},
        },
        "operations/refund:o-1/started": {"lease_token": token},
        "operations/refund:o-1/outcome": {"lease_token": token, "outcome": "unknown"},
    }


def _unchanged(run_id: str) -> tuple[Any, ...]:
    run = AgentRun.objects.get(run_id=run_id)
    return (
        run.state_revision,
        run.lease_epoch,
        run.lease_owner,
        run.lease_expires_at,
        AgentEvent.objects.filter(run_id=uuid.UUID(run_id)).count(),
        ToolOperation.objects.filter(run_id=uuid.UUID(run_id)).count(),
    )


def test_every_worker_protocol_body_refuses_an_unknown_field_and_changes_nothing(api, claimed, tenant):
    run_id = claimed["run_id"]
    before = _unchanged(run_id)
    bodies = _bodies(claimed)
    commit = {k: v for k, v in bodies["commit"].items() if k != "next_step"}
    sent = [(route, {**body, "bogus_field": 1}) for route, body in bodies.items()] + [
        ("commit", {**commit, outcome: {**fields, "bogus_field": 1}})
        for outcome, fields in (("suspend", {"reason": "x"}), ("complete", {}), ("fail", {"code": "x"}))
    ]
    for route, body in sent:
        r = api.post(f"/api/v1/workers/runs/{run_id}/{route}", body, format="json")
        assert r.status_code == 400, (route, body, r.content)
        assert "unknown field" in str(r.json()["error"]["details"].get("bogus_field")), (route, r.json())
    claim = api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"], "bogus_field": 1}, format="json")
    assert claim.status_code == 400 and "bogus_field" in claim.json()["error"]["details"]
    assert _unchanged(run_id) == before
    # the same bodies without the field are taken (the commit last: it moves the run on)
    for route in ("operations/prepare", "heartbeat", "commit"):
        r = api.post(f"/api/v1/workers/runs/{run_id}/{route}", bodies[route], format="json")
        assert r.status_code == 200, (route, r.content)


@pytest.mark.parametrize("token", ["é", "lt1.é.x", "lt1.e30.é", "lt1.☃.☃", "lt1.\u00ff\u00fe.x"])
def test_a_lease_token_outside_ascii_is_a_403_on_every_route(api, claimed, tenant, token):
    run_id = claimed["run_id"]
    before = _unchanged(run_id)
    for route, body in _bodies(claimed).items():
        r = api.post(f"/api/v1/workers/runs/{run_id}/{route}", {**body, "lease_token": token}, format="json")
        assert r.status_code == 403, (route, r.content)
        assert r.json()["error"]["code"] == "invalid_lease_token"
    assert _unchanged(run_id) == before


def test_an_idempotency_key_outside_ascii_names_one_start_and_one_signal(api, tenant):
    """A header's bytes reach Django decoded as Latin-1 (UTF-8's é as 'Ã©'): the same bytes again are
    the same key, for a run's start and for a signal."""
    registered = api.post(
        "/api/v1/workflows/external/",
        {"name": "ext.sig", "version": "1", "steps": ["a"], "signals": ["shipped"]},
        format="json",
    )
    assert registered.status_code == 201, registered.content
    key = "é☃".encode().decode("latin-1")
    body = {"workflow": "ext.sig", "input": {}}
    first = api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    again = api.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert first.json()["run_id"] == again.json()["run_id"]
    signal = f"/api/v1/runs/{first.json()['run_id']}/signals/shipped"
    sent = [api.post(signal, {"n": 1}, format="json", HTTP_IDEMPOTENCY_KEY=key) for _ in range(2)]
    assert [r.status_code for r in sent] in ([201, 200], [202, 200], [201, 201], [202, 202]), sent[1].content
    assert sent[0].json() == sent[1].json()
