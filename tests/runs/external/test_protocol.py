"""The worker protocol over HTTP in-process: registration, claim, operations, commit, and every refusal."""

from __future__ import annotations

import time
import uuid

import pytest

from core.api_auth import api_key_create
from core.tenancy import tenant_bind
from runs.engine.steps import run_advance
from runs.external.protocol import claim_wait_slot
from runs.external.tokens import lease_token_sign
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.runs.external.conftest import REFUND, key_client

pytestmark = pytest.mark.django_db


def _start(api, order_id: str = "o-1") -> str:
    response = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": order_id}}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()["run_id"]


def _claim(api, **extra):
    return api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"], **extra}, format="json")


def _commit_next(api, w: str, claim: dict, next_step: str = "refund"):
    """Commit the claimed step's state unchanged, moving on to `next_step`."""
    body = {
        "lease_token": claim["lease_token"],
        "expected_revision": claim["revision"],
        "state": claim["state"],
        "next_step": next_step,
    }
    return api.post(w + "commit", body, format="json")


def _snapshot(text_id: str) -> tuple:
    run_id = uuid.UUID(text_id)
    run = AgentRun.objects.get(run_id=run_id)
    ops = sorted(
        ToolOperation.objects.filter(run_id=run_id).values_list("operation_id", "status", "attempts")
    )
    return (
        run.state_revision,
        run.status,
        run.lease_epoch,
        run.lease_owner,
        AgentEvent.objects.filter(run_id=run_id).count(),
        ops,
    )


def test_an_external_run_is_claimed_by_an_outside_worker_and_never_by_keepers_own(api, workflow, tenant):
    run_id = _start(api)
    assert run_advance(run_id=uuid.UUID(run_id)).outcome == "not_acquired"  # Keeper's worker leaves it alone
    assert AgentRun.objects.get(run_id=run_id).lease_epoch == 0
    claim = _claim(api, worker_id="w1")
    assert claim.status_code == 200, claim.content
    body = claim.json()
    assert (body["run_id"], body["step"], body["revision"], body["lease_epoch"]) == (run_id, "lookup", 1, 1)
    assert body["state"]["order_id"] == "o-1" and body["operations_in_doubt"] == []
    assert _claim(api).status_code == 204  # nothing else ready


def test_the_whole_protocol_moves_the_run_to_completion_with_one_operation(api, workflow, tenant):
    run_id = _start(api)
    c = _claim(api).json()
    w = f"/api/v1/workers/runs/{run_id}/"
    r = api.post(
        w + "commit",
        {
            "lease_token": c["lease_token"],
            "expected_revision": c["revision"],
            "state": {**c["state"], "order": {"amount": 10}},
            "next_step": "refund",
            "payload": {"note": "looked up"},
        },
        format="json",
    )
    assert r.status_code == 200, r.content
    assert r.json()["revision"] == 2 and r.json()["status"] == "running" and not r.json()["replayed"]
    c = _claim(api).json()
    assert (c["step"], c["revision"]) == ("refund", 2)
    token = c["lease_token"]
    prep = {
        "lease_token": token,
        "operation_id": "refund:o-1",
        "tool_name": "payments.refund",
        "tool_contract_version": "payments.v1",
        "request": {"order_id": "o-1", "amount_minor": 10},
    }
    first = api.post(w + "operations/prepare", prep, format="json")
    assert first.status_code == 200, first.content
    assert first.json()["idempotency_key"] == "refund:o-1" and first.json()["status"] == "prepared"
    assert (
        api.post(w + "operations/prepare", prep, format="json").json()["status"] == "prepared"
    )  # idempotent
    changed = api.post(
        w + "operations/prepare", {**prep, "request": {"order_id": "o-1", "amount_minor": 99}}, format="json"
    )
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "operation_request_changed"
    for dots in (".", ".."):  # path segments a client resolves away: its URLs could not be reached
        refused = api.post(w + "operations/prepare", {**prep, "operation_id": dots}, format="json")
        assert refused.status_code == 400 and "not dots alone" in refused.content.decode(), refused.content
    assert (
        api.post(w + "operations/prepare", {**prep, "operation_id": "a..b"}, format="json").status_code == 200
    )
    assert (
        api.post(w + "operations/refund:o-1/started", {"lease_token": token}, format="json").json()["status"]
        == "started"
    )
    unknown_is_not_failed = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": token, "outcome": "unknown", "note": "timeout"},
        format="json",
    )
    assert unknown_is_not_failed.json()["status"] == "unknown"
    unknown_again = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": token, "outcome": "unknown", "note": "timeout"},
        format="json",
    )
    assert unknown_again.status_code == 200 and unknown_again.json()["status"] == "unknown"
    failed = api.post(
        w + "operations/refund:o-1/outcome", {"lease_token": token, "outcome": "failed"}, format="json"
    )
    assert (
        failed.status_code == 409 and ToolOperation.objects.get(operation_id="refund:o-1").status == "unknown"
    )
    ok = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": token, "outcome": "succeeded", "external_ref": "rf_1"},
        format="json",
    )
    assert ok.json()["status"] == "succeeded" and ok.json()["external_ref"] == "rf_1"
    # The same outcome sent again (a client whose answer was lost retries): the same answer, nothing
    # written twice; another outcome or reference is still refused.
    history = len(ToolOperation.objects.get(operation_id="refund:o-1").history)
    again = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": token, "outcome": "succeeded", "external_ref": "rf_1"},
        format="json",
    )
    assert again.status_code == 200 and again.json() == ok.json()
    assert len(ToolOperation.objects.get(operation_id="refund:o-1").history) == history
    for other in (
        {"outcome": "succeeded", "external_ref": "rf_2"},
        {"outcome": "unknown", "note": "timeout"},
    ):
        refused = api.post(
            w + "operations/refund:o-1/outcome", {"lease_token": token, **other}, format="json"
        )
        assert refused.status_code == 409, other
    hb = api.post(w + "heartbeat", {"lease_token": token}, format="json")
    assert hb.status_code == 200 and hb.json()["lease_expires_at"]
    done = api.post(
        w + "commit",
        {
            "lease_token": token,
            "expected_revision": 2,
            "state": c["state"],
            "complete": {"result": {"refund_id": "rf_1"}},
        },
        format="json",
    )
    assert done.status_code == 200 and done.json()["status"] == "completed"
    run = AgentRun.objects.get(run_id=run_id)
    assert (run.status, run.result, run.lease_owner) == ("completed", {"refund_id": "rf_1"}, None)
    events = list(
        AgentEvent.objects.filter(run_id=run_id).order_by("seq").values_list("event_type", "step_id", "actor")
    )
    assert [e[:2] for e in events] == [
        ("run_started", None),
        ("step_completed", "lookup"),
        ("run_completed", "refund"),
    ]
    assert events[1][2].startswith("external:kp_")


def _first_commit(api) -> tuple[str, dict]:
    """A started run, claimed, and the body of its first step's commit (on to "refund")."""
    run_id = _start(api)
    c = _claim(api).json()
    return run_id, {
        "lease_token": c["lease_token"],
        "expected_revision": 1,
        "state": c["state"],
        "next_step": "refund",
    }


def test_a_commit_sent_again_after_a_lost_answer_gets_the_same_answer_and_writes_once(api, workflow, tenant):
    run_id, body = _first_commit(api)
    first = api.post(f"/api/v1/workers/runs/{run_id}/commit", body, format="json").json()
    again = api.post(f"/api/v1/workers/runs/{run_id}/commit", body, format="json")
    assert again.status_code == 200 and again.json() == {**first, "replayed": True}
    assert AgentEvent.objects.filter(run_id=run_id, event_type="step_completed").count() == 1
    other = api.post(f"/api/v1/workers/runs/{run_id}/commit", {**body, "next_step": "verify"}, format="json")
    assert other.status_code == 409 and other.json()["error"]["details"]["current_revision"] == 2
    # Another spend is another commit too: it is not taken as the first one sent again.
    spent = api.post(
        f"/api/v1/workers/runs/{run_id}/commit", {**body, "spent": {"tokens": 900}}, format="json"
    )
    assert spent.status_code == 409


def test_out_of_range_numbers_in_a_commit_are_refused_and_change_nothing(api, workflow, tenant):
    """An expected_revision past a bigint would be a 500 from the database, and a spent wall time of
    1e308 s, taken, would make the run's engineer page a 500 for good."""
    run_id, body = _first_commit(api)
    for bad in (
        {"expected_revision": 2**63},
        {"spent": {"wall_s": 1e308}},
        {"spent": {"cost_usd": 1e308}},
        {"spent": {"tokens": 2**63 - 1}},
        {"spent": {"tokens": 812.0}},
        {"spent": {"token": 812}},  # misspelt: it would have been charged as nothing
    ):
        refused = api.post(f"/api/v1/workers/runs/{run_id}/commit", {**body, **bad}, format="json")
        assert refused.status_code == 400, (bad, refused.content)
        named = bad.get("spent", bad)  # the field at fault is named
        assert set(named) <= set(refused.json()["error"]["details"]) | {"spent"}, refused.json()
    assert list(AgentEvent.objects.filter(run_id=run_id).values_list("event_type", flat=True)) == [
        "run_started"
    ]
    taken = api.post(
        f"/api/v1/workers/runs/{run_id}/commit",
        {**body, "spent": {"wall_s": 3600.0, "tokens": 812}},
        format="json",
    )
    assert taken.status_code == 200, taken.content


def test_bad_tokens_stale_revisions_and_unprepared_operations_change_nothing(
    api, workflow, tenant, other_tenant
):
    run_id = _start(api)
    c = _claim(api).json()
    token, w = c["lease_token"], f"/api/v1/workers/runs/{run_id}/"
    before = _snapshot(run_id)
    commit = {"expected_revision": 1, "state": {"order_id": "evil"}, "next_step": "refund"}
    head, body, mac = token.split(".")
    forged = f"{head}.{body}.{mac[:-2]}{'AA' if mac[-2:] != 'AA' else 'BB'}"
    epoch = AgentRun.objects.get(run_id=run_id).lease_epoch
    owner = AgentRun.objects.get(run_id=run_id).lease_owner
    expired = lease_token_sign(
        run_id=uuid.UUID(run_id),
        tenant_id=tenant.tenant_id,
        epoch=epoch,
        owner=owner,
        issued_at=time.time() - 2 * 86400,
    )
    other = lease_token_sign(
        run_id=uuid.UUID(run_id), tenant_id=other_tenant.tenant_id, epoch=epoch, owner=owner
    )
    for bad, code in [
        (forged, "invalid_lease_token"),
        (expired, "lease_token_expired"),
        (other, "lease_token_other_tenant"),
        ("garbage", "invalid_lease_token"),
    ]:
        for path, extra in [
            ("commit", commit),
            ("heartbeat", {}),
            ("release", {}),
            ("operations/refund:o-1/outcome", {"outcome": "succeeded", "external_ref": "x"}),
        ]:
            r = api.post(w + path, {"lease_token": bad, **extra}, format="json")
            assert (r.status_code, r.json()["error"]["code"]) == (403, code), (path, r.content)
    # Another tenant's key with the right token: the run does not exist for that key.
    with tenant_bind(other_tenant.tenant_id):
        globex = key_client(api_key_create(tenant=other_tenant, name="g", scope="write").plaintext)
    r = globex.post(w + "commit", {"lease_token": token, **commit}, format="json")
    # Another tenant's key: the run does not exist for it, whatever token it sends.
    assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"
    stale = api.post(w + "commit", {"lease_token": token, **commit, "expected_revision": 7}, format="json")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_revision"
    assert stale.json()["error"]["details"]["current_revision"] == 1
    fake = {k: v for k, v in commit.items() if k != "next_step"}
    # A worker cannot write Keeper's own reasons (a reconciliation with no operation in doubt, a spent
    # budget) nor wait for an approval it never asked for.
    for reason, code in [
        ("subject_erased", "reserved_reason"),
        ("reconciliation_required", "nothing_in_doubt"),
        ("budget_exhausted", "reserved_reason"),
        ("too_many_attempts", "reserved_reason"),
        ("langgraph_interrupt", "reserved_reason"),
        ("approval_missing", "reserved_reason"),
        ("unsupported_checkpoint", "reserved_reason"),
        ("fork_abandoned", "reserved_reason"),
        ("approval_required", "approval_not_requested"),
    ]:
        reserved = api.post(
            w + "commit", {"lease_token": token, **fake, "suspend": {"reason": reason}}, format="json"
        )
        assert (reserved.status_code, reserved.json()["error"]["code"]) == (422, code), reason
    unknown_step = api.post(
        w + "commit", {"lease_token": token, **commit, "next_step": "nope"}, format="json"
    )
    assert (unknown_step.status_code, unknown_step.json()["error"]["code"]) == (422, "unknown_step")
    never = api.post(
        w + "operations/refund:o-9/outcome",
        {"lease_token": token, "outcome": "succeeded", "external_ref": "rf"},
        format="json",
    )
    assert never.status_code == 404 and never.json()["error"]["code"] == "operation_not_found"
    started = api.post(w + "operations/refund:o-9/started", {"lease_token": token}, format="json")
    assert started.status_code == 404
    assert _snapshot(run_id) == before
    assert not ToolOperation.objects.filter(operation_id="refund:o-9").exists()


def test_an_outcome_after_a_lost_lease_settles_an_operation_a_take_over_prepared_again(
    api, workflow, tenant, monkeypatch
):
    """Worker a started the refund and lost its lease; b's take-over asked the lookup (authoritative:
    not applied yet) once a's call could have ended, and prepared the operation again; a's answer from
    the payments system (succeeded, with its reference) still settles it: an outcome may be reported
    after the lease is lost (the money's truth)."""
    from dataclasses import replace

    from runs.engine.registry import ToolLookup, registry

    contract = registry.tool("payments.refund")
    assert contract is not None
    monkeypatch.setitem(
        registry._tools,
        "payments.refund",
        replace(contract, lookup=lambda operation_id: ToolLookup(authoritative=True, applied=False)),
    )
    run_id = _start(api)
    w = f"/api/v1/workers/runs/{run_id}/"
    a = _claim(api, worker_id="a", lease_ttl=1).json()
    first = _commit_next(api, w, a)
    assert first.status_code == 200, first.content
    a = _claim(api, worker_id="a", lease_ttl=1).json()
    _start_refund(api, w, a["lease_token"], call_timeout_s=2)
    time.sleep(1.3)  # a's lease runs out while the payments system answers it
    assert _claim(api, worker_id="b").status_code == 204  # a's call may be in flight: nobody resends
    assert ToolOperation.objects.get(operation_id="refund:o-1").status == "started"
    time.sleep(1.0)  # a's call has surely ended
    b = _claim(api, worker_id="b").json()
    assert b["verified"] == "lease_takeover"
    op = ToolOperation.objects.get(operation_id="refund:o-1")
    assert (op.status, op.attempts) == ("prepared", 1)  # the lookup said: not applied (yet)
    late = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": a["lease_token"], "outcome": "succeeded", "external_ref": "rf_late"},
        format="json",
    )
    assert late.status_code == 200, late.content
    op.refresh_from_db()
    assert (op.status, op.external_ref) == ("succeeded", "rf_late")
    # b, preparing the same operation, finds it settled and does not send it again.
    again = api.post(w + "operations/prepare", _refund_prep(b["lease_token"], "o-1"), format="json")
    assert again.status_code == 200 and again.json()["status"] == "succeeded"
    # A prepared operation never started is not settled by a report: nothing was sent.
    fresh = api.post(w + "operations/prepare", _refund_prep(b["lease_token"], "o-2"), format="json")
    assert fresh.status_code == 200
    never = api.post(
        w + "operations/refund:o-2/outcome",
        {"lease_token": b["lease_token"], "outcome": "succeeded", "external_ref": "rf_x"},
        format="json",
    )
    assert never.status_code == 409 and never.json()["error"]["code"] == "operation_state_conflict"


def test_two_workers_racing_for_one_run_never_both_commit(api, workflow, tenant):
    run_id = _start(api)
    a = _claim(api, worker_id="a", lease_ttl=1).json()
    assert _claim(api, worker_id="b").status_code == 204  # held
    time.sleep(1.3)  # a's lease runs out (a paused, or a partition)
    b = _claim(api, worker_id="b").json()
    assert (
        b["run_id"] == run_id
        and b["verified"] == "lease_takeover"
        and b["lease_epoch"] == a["lease_epoch"] + 1
    )
    w = f"/api/v1/workers/runs/{run_id}/"
    late = _commit_next(api, w, a)
    assert late.status_code == 409 and late.json()["error"]["code"] in ("stale_revision", "lease_lost")
    hb = api.post(w + "heartbeat", {"lease_token": a["lease_token"]}, format="json")
    assert hb.status_code == 409 and hb.json()["error"]["code"] == "lease_lost"
    assert "another worker took it over (epoch 2, this token's is 1)" in hb.json()["error"]["message"]
    won = _commit_next(api, w, b)
    assert won.status_code == 200, won.content
    assert AgentEvent.objects.filter(run_id=run_id, event_type="step_completed").count() == 1


def test_registration_refuses_bad_definitions_and_inputs_with_reasons(api, workflow, tenant):
    assert api.post("/api/v1/workflows/external/", REFUND, format="json").status_code == 200  # same again
    cases = [
        ({**REFUND, "steps": ["lookup", "refund"]}, 409, "workflow_version_exists"),
        ({**REFUND, "name": "refund"}, 422, "invalid_name"),
        ({**REFUND, "version": "2", "steps": ["a", "a"]}, 422, "invalid_steps"),
        ({**REFUND, "version": "2", "input_schema": {"type": 7}}, 422, "invalid_input_schema"),
        (
            {**REFUND, "version": "2", "tools": [{"name": "payments.refund", "version": "v9"}]},
            422,
            "invalid_tools",
        ),
        ({**REFUND, "version": "2", "steps": []}, 400, "invalid_input"),
    ]
    for body, status, code in cases:
        r = api.post("/api/v1/workflows/external/", body, format="json")
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (body, r.content)
    bad = api.post("/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": 5}}, format="json")
    assert bad.status_code == 422 and "order_id" in bad.json()["error"]["message"]
    unknown = _claim(api, workflows=["nope"])
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_workflow"
    assert api.get("/api/v1/workflows/external/").json()[0]["steps"] == REFUND["steps"]


def test_a_long_poll_waits_up_to_its_timeout_for_a_run(api, workflow, tenant):
    started = time.monotonic()
    assert _claim(api, wait_seconds=1).status_code == 204
    assert 0.9 <= time.monotonic() - started < 10


def test_past_the_waiting_claims_a_claim_looks_once_and_says_when_to_come_back(
    api, workflow, tenant, settings
):
    settings.KEEPER_CLAIM_WAITERS = 1
    with claim_wait_slot(20) as first:  # a claim of this process waits now
        assert first
        started = time.monotonic()
        second = _claim(api, wait_seconds=3)
        assert time.monotonic() - started < 2  # it did not wait, holding a thread
        assert second.status_code == 204 and second["Retry-After"] == "3"
        assert _claim(api, wait_seconds=30)["Retry-After"] == "5"  # at most 5 s
        assert _claim(api, wait_seconds=0).get("Retry-After") is None  # it asked not to wait
        run_id = api.post(
            "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-1"}}, format="json"
        )
        ready = _claim(api, wait_seconds=3)
        assert (
            ready.status_code == 200 and ready.json()["run_id"] == run_id.json()["run_id"]
        )  # it looked once
    started = time.monotonic()
    waited = _claim(api, wait_seconds=1)  # the slot is free again: this one waits
    assert (
        waited.status_code == 204 and waited.get("Retry-After") is None and time.monotonic() - started >= 0.9
    )
    settings.KEEPER_CLAIM_WAITERS = 0
    assert _claim(api, wait_seconds=2)["Retry-After"] == "2"


def test_the_worker_endpoints_are_in_the_openapi_schema(api):
    paths = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    for path in [
        "/api/v1/workers/claim",
        "/api/v1/workers/runs/{run_id}/commit",
        "/api/v1/workers/runs/{run_id}/operations/{operation_id}/outcome",
        "/api/v1/workflows/external/",
    ]:
        assert path in paths


def _refund_prep(token: str, order_id: str = "o-1") -> dict:
    return {
        "lease_token": token,
        "operation_id": f"refund:{order_id}",
        "tool_name": "payments.refund",
        "tool_contract_version": "payments.v1",
        "request": {"order_id": order_id},
    }


def _start_refund(api, w: str, token: str, call_timeout_s: float = 0) -> dict:
    """Prepare refund:o-1 under the lease and report it started (no outcome yet: in doubt). Its call
    lasts `call_timeout_s` at most (0: it is over, and a lookup's answer is trusted at once)."""
    prep = _refund_prep(token)
    assert api.post(w + "operations/prepare", prep, format="json").status_code == 200
    body = {"lease_token": token, "call_timeout_s": call_timeout_s}
    started = api.post(w + "operations/refund:o-1/started", body, format="json")
    assert started.status_code == 200, started.content
    return prep


def test_a_claim_names_the_operations_in_doubt_a_released_run_left_behind(api, workflow, tenant):
    run_id = _start(api)
    c = _claim(api).json()
    w = f"/api/v1/workers/runs/{run_id}/"
    prep = _start_refund(api, w, c["lease_token"])
    assert api.post(w + "release", {"lease_token": c["lease_token"]}, format="json").json() == {
        "released": True
    }
    again = api.post(w + "release", {"lease_token": c["lease_token"]}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "lease_lost"
    assert "was given back by a commit or a release; claim it again" in again.json()["error"]["message"]
    stale = api.post(w + "operations/prepare", prep, format="json")  # the released lease cannot prepare
    assert stale.status_code == 409
    after = _claim(api).json()
    assert after["operations_in_doubt"] == [
        {"operation_id": "refund:o-1", "tool_name": "payments.refund", "status": "started", "attempts": 1}
    ]
    # With an operation in doubt the worker may suspend the run for a person's reconciliation (what the
    # Python client does on OperationInDoubt); without one it may not (the nothing_in_doubt case above).
    waiting = api.post(
        w + "commit",
        {
            "lease_token": after["lease_token"],
            "expected_revision": after["revision"],
            "state": after["state"],
            "suspend": {"reason": "reconciliation_required", "detail": "refund:o-1 timed out"},
        },
        format="json",
    )
    assert waiting.status_code == 200, waiting.content
    assert AgentRun.objects.get(run_id=run_id).suspend_reason == "reconciliation_required"


def test_a_worker_cannot_end_a_run_while_one_of_its_operations_is_in_doubt(api, workflow, tenant):
    """A worker must not complete a run whose refund was started and never reported, leaving the
    operation in doubt on a finished run for ever. Complete and fail are refused (nothing
    written) until each outcome is reported; then the run completes."""
    run_id = _start(api)
    c = _claim(api).json()
    w = f"/api/v1/workers/runs/{run_id}/"
    token = c["lease_token"]
    _start_refund(api, w, token)
    before = _snapshot(run_id)
    base = {"lease_token": token, "expected_revision": c["revision"], "state": c["state"]}
    for end in ({"complete": {"result": {"refunded": True}}}, {"fail": {"code": "gave_up", "detail": "x"}}):
        refused = api.post(w + "commit", {**base, **end}, format="json")
        assert refused.status_code == 422, refused.content
        error = refused.json()["error"]
        assert error["code"] == "operations_in_doubt" and "report each outcome first" in error["message"]
        assert [o["operation_id"] for o in error["details"]["operations_in_doubt"]] == ["refund:o-1"]
        assert _snapshot(run_id) == before
    outcome = {"lease_token": token, "outcome": "succeeded", "external_ref": "rf_1", "result": {}}
    assert api.post(w + "operations/refund:o-1/outcome", outcome, format="json").status_code == 200
    done = api.post(w + "commit", {**base, "complete": {"result": {"refunded": True}}}, format="json")
    assert done.status_code == 200, done.content
    assert AgentRun.objects.get(run_id=run_id).status == "completed"


def test_a_run_past_its_deadline_is_not_given_to_an_outside_worker(api, workflow, tenant):
    """As Keeper's own workers: a claim checks the run's deadline (waiting included) beside its budgets."""
    response = api.post(
        "/api/v1/runs/",
        {"workflow": "ext.refund", "input": {"order_id": "o-late", "budgets": {"deadline_s": 0.2}}},
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["run_id"]
    time.sleep(0.4)
    assert _claim(api, worker_id="w1").status_code == 204
    run = AgentRun.objects.get(run_id=run_id)
    assert (run.status, run.suspend_reason) == ("suspended", "deadline_passed")
    assert "deadline (0.2 s from its start" in run.suspend_detail
    assert not AgentEvent.objects.filter(run_id=run_id, step_id="lookup").exists()


def test_the_redispatch_sweep_leaves_external_runs_to_outside_workers(api, workflow, tenant):
    """Keeper's workers can do nothing with an external run: the sweep must not wake them for one
    (an outside tester saw a re-dispatch every 15 s), while a Keeper run in the same state is woken."""
    from runs.engine.runs import run_start
    from runs.kernel import apply
    from runs.kernel import moves as m

    external = uuid.UUID(_start(api, "o-sweep"))
    own = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run.run_id
    claimed = apply(
        m.RunsRedispatched(
            grace=0,
            limit=50,
        )
    )
    assert own in claimed and external not in claimed


def test_new_runs_start_on_the_newest_external_version_by_pep_440_not_the_last_registered(
    api, workflow, tenant
):
    """The newest is by PEP 440 order, as for workflows in code (and as documented), not the last
    registered: registering "1.5" after "2" does not move new runs back to 1.5."""
    for version in ("2", "1.5", "not-a-version"):
        registered = api.post("/api/v1/workflows/external/", {**REFUND, "version": version}, format="json")
        assert registered.status_code == 201, registered.content
    started = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-v"}}, format="json"
    )
    assert started.status_code == 201, started.content
    assert AgentRun.objects.get(run_id=started.json()["run_id"]).workflow_version == "2"


def test_a_version_spelt_otherwise_is_the_same_version(api, workflow, tenant):
    """Spellings of one PEP 440 version ("1.0", "01", "v1", "1.00") are not new versions, one with
    other steps, for new runs to go to whichever came last. The same definition
    under another spelling is the registered version (200); another definition is a 409."""
    version = REFUND["version"]
    for spelt in (f"{version}.0", f"0{version}", f"v{version}"):
        again = api.post("/api/v1/workflows/external/", {**REFUND, "version": spelt}, format="json")
        assert again.status_code == 200, again.content
        assert again.json()["version"] == version
    other = api.post(
        "/api/v1/workflows/external/",
        {**REFUND, "version": f"{version}.00", "steps": ["only"]},
        format="json",
    )
    assert other.status_code == 409 and other.json()["error"]["code"] == "workflow_version_exists"
    assert f"as '{version}': the same version in PEP 440" in other.json()["error"]["message"]
    started = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-v"}}, format="json"
    )
    assert started.status_code == 201, started.content
    run = AgentRun.objects.get(run_id=started.json()["run_id"])
    assert (run.workflow_version, run.next_step) == (version, REFUND["steps"][0])
    for spelt in (f"{version}.0", f"v{version}"):  # a start naming it otherwise gets the registered one
        named = api.post(
            "/api/v1/runs/",
            {"workflow": "ext.refund", "workflow_version": spelt, "input": {"order_id": "o-w"}},
            format="json",
        )
        assert named.status_code == 201, named.content
        assert named.json()["workflow_version"] == version


def test_after_its_subject_is_erased_a_worker_cannot_report_an_outcome_into_the_run(api, workflow, tenant):
    """With its old lease token a worker cannot report a succeeded outcome carrying the subject's
    address after a clean receipt. It is refused (409 subject_erased, nothing written), and
    the operation waits for a person in the support inbox."""
    from erasure.services import erasure_execute, erasure_request_create
    from runs.engine.selectors import operation_in_doubt_list

    response = api.post(
        "/api/v1/runs/",
        {"workflow": "ext.refund", "input": {"order_id": "o-1"}, "subject": "cust-w-77"},
        format="json",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["run_id"]
    c = _claim(api).json()
    w = f"/api/v1/workers/runs/{run_id}/"
    _start_refund(api, w, c["lease_token"])
    request = erasure_request_create(tenant=tenant, subject_id="cust-w-77", requested_by="user:compliance")
    assert erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id).status == "completed"
    late = api.post(
        w + "operations/refund:o-1/outcome",
        {
            "lease_token": c["lease_token"],
            "outcome": "succeeded",
            "external_ref": "ref-cust-w-77",
            "result": {"to": "cust-w-77@mail.example"},
        },
        format="json",
    )
    assert late.status_code == 409 and late.json()["error"]["code"] == "subject_erased", late.content
    # Cancelled afterwards, the run loses the reason but keeps its erased subject: still refused.
    assert api.post(f"/api/v1/runs/{run_id}/cancel", {"note": "done"}, format="json").status_code == 200
    later = api.post(
        w + "operations/refund:o-1/outcome",
        {"lease_token": c["lease_token"], "outcome": "succeeded", "external_ref": "ref-cust-w-77"},
        format="json",
    )
    assert later.status_code == 409 and later.json()["error"]["code"] == "subject_erased", later.content
    op = ToolOperation.objects.get(run_id=run_id)
    assert op.status == "started" and "cust-w-77" not in f"{op.result} {op.external_ref}"
    assert [o.pk for o in operation_in_doubt_list(tenant_ids=[tenant.tenant_id], limit=10)] == [op.pk]


def test_a_refused_worker_id_says_the_rule(api, workflow, tenant):
    answer = _claim(api, worker_id="w" * 1000)
    assert answer.status_code == 400
    assert "1 to 64 letters, digits" in answer.content.decode()


def test_an_unknown_workflow_is_refused_naming_the_tenants_outside_workflows_too(api, workflow, tenant):
    answer = api.post("/api/v1/runs/", {"workflow": "ext.refnud", "input": {}}, format="json")
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "unknown_workflow"
    assert "outside workflows: ext.refund" in answer.json()["error"]["message"]


def test_a_run_an_outside_worker_completes_is_sent_to_learn_if_it_answered_as_keepers_own_are(
    api, workflow, tenant, settings
):
    from runs.conversations.messages import conversation_append
    from tests.broker import task_queued

    sent = {}
    # Behind a transaction pooler the commit runs in a function, which cannot say: one read asks.
    for prepared, answers in ((True, True), (True, False), (False, True), (False, False)):
        settings.KEEPER_PREPARED_STATEMENTS = prepared
        run_id = _start(api, f"o-{len(sent)}")
        if answers:
            conversation_append(
                tenant=tenant,
                run_id=uuid.UUID(run_id),
                event_type="assistant_message",
                client_message_id="a-1",
                body={"content": "Looking into your refund."},
                actor="client",
            )
        w = f"/api/v1/workers/runs/{run_id}/"
        c = _claim(api).json()
        assert c["run_id"] == run_id and _commit_next(api, w, c).status_code == 200
        c = _claim(api).json()
        body = {"lease_token": c["lease_token"], "expected_revision": c["revision"], "state": c["state"]}
        done = api.post(w + "commit", {**body, "complete": {"result": {"refunded": True}}}, format="json")
        assert done.status_code == 200 and done.json()["status"] == "completed", done.content
        sent[prepared, answers] = task_queued("workers.tasks.learn_procedures", run_id)
    assert sent == {(True, True): True, (True, False): False, (False, True): True, (False, False): False}


def test_a_turn_an_outside_agent_answered_is_learned_when_its_run_completes(api, workflow, tenant):
    from memory.procedures.models import Procedure, ProcedureSource
    from tests.broker import task_queued
    from workers.tasks import learn_procedures

    run_id = _start(api, "o-5")
    url = f"/api/v1/runs/{run_id}/messages/"
    asked = api.post(
        url,
        {"type": "user_message", "client_message_id": "m-1", "content": "My order arrived broken"},
        format="json",
    ).json()["seq"]
    for n, (tool, arguments) in enumerate(
        (("lookup_order", {"order_id": "o-5"}), ("refund", {"amount": 25}))
    ):
        call = {"call_id": f"c-{n}", "tool": tool}
        api.post(
            url,
            {"type": "tool_call", "client_message_id": f"c-{n}", "arguments": arguments, **call},
            format="json",
        )
        api.post(
            url,
            {"type": "tool_result", "client_message_id": f"r-{n}", "content": {"ok": True}, **call},
            format="json",
        )
    said = api.post(
        url,
        {
            "type": "assistant_message",
            "client_message_id": "a-1",
            "content": "Refunded.",
            "in_reply_to": asked,
        },
        format="json",
    )
    assert said.status_code == 201, said.content
    w = f"/api/v1/workers/runs/{run_id}/"
    c = _claim(api).json()
    assert _commit_next(api, w, c).status_code == 200
    c = _claim(api).json()
    body = {"lease_token": c["lease_token"], "expected_revision": c["revision"], "state": c["state"]}
    assert api.post(w + "commit", {**body, "complete": {"result": {}}}, format="json").status_code == 200
    assert task_queued("workers.tasks.learn_procedures", run_id)
    learn_procedures(run_id)  # what the worker that takes the task runs
    [procedure] = Procedure.objects.filter(tenant=tenant)
    assert procedure.status == "proposed" and [s["tool"] for s in procedure.steps] == [
        "lookup_order",
        "refund",
    ]
    assert [(str(s.run_id), s.request_seq) for s in ProcedureSource.objects.filter(procedure=procedure)] == [
        (run_id, asked)
    ]
