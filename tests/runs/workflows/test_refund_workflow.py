"""Practicum 33.1 end to end: the refund workflow against the payments sandbox over real HTTP."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from runs.engine.approvals import approval_approve
from runs.engine.operations import operation_reconcile
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Approval, ToolOperation

pytestmark = pytest.mark.django_db(transaction=True)


class Sandbox:
    def __init__(self, url: str):
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode() if body else None,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def order(self, order_id: str, **overrides: Any) -> None:
        delivered = (datetime.now(UTC) - timedelta(days=3)).isoformat()
        self.call(
            "POST",
            "/orders",
            {
                "order_id": order_id,
                "customer_id": "c-1",
                "amount_minor": 2500,
                "currency": "EUR",
                "status": "delivered",
                "delivered_at": delivered,
                **overrides,
            },
        )

    def fault(self, fault: str, **kwargs: Any) -> None:
        self.call("POST", "/faults", {"fault": fault, "order_id": None, "remaining": None, **kwargs})

    def ledger(self, order_id: str) -> list[dict[str, Any]]:
        return self.call("GET", f"/refunds?order_id={order_id}")["results"]


@pytest.fixture
def sandbox(live_server, settings) -> Sandbox:
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    settings.KEEPER_RETRY_BACKOFF = 0
    return Sandbox(settings.KEEPER_SANDBOX_URL)


def _start(tenant, order_id: str, **extra: Any) -> AgentRun:
    return run_start(
        tenant=tenant, workflow_name="refund", input={"order_id": order_id, **extra}, actor="test"
    ).run


def _drive(run: AgentRun, limit: int = 20) -> AgentRun:
    for _ in range(limit):
        if run_advance(run_id=run.run_id, worker_id="w-test").outcome != "committed":
            break
    run.refresh_from_db()
    return run


def test_refund_waits_for_approval_then_refunds_once_and_verifies(tenant, sandbox):
    sandbox.order("o-100")
    run = _drive(_start(tenant, "o-100", reason="arrived broken"))
    assert (run.status, run.suspend_reason, run.next_step) == ("suspended", "approval_required", "approve")
    approval = Approval.objects.get(run=run, status="pending")
    assert approval.request == {"order_id": "o-100", "amount_minor": 2500, "currency": "EUR"}
    assert sandbox.ledger("o-100") == []
    approval_approve(approval_id=approval.approval_id, actor="user:sam", note="fine")
    run = _drive(run)
    assert run.status == "completed" and run.result["outcome"] == "refunded"
    [refund] = sandbox.ledger("o-100")
    op = ToolOperation.objects.get(run=run)
    assert (op.operation_id, op.status, op.external_ref) == ("refund:o-100", "succeeded", refund["refund_id"])
    assert op.tool_contract_version == "payments.v1"
    steps = list(
        AgentEvent.objects.filter(run=run, event_type="step_completed").values_list("step_id", flat=True)
    )
    assert steps == ["lookup_order", "decide", "approve", "refund"]


@pytest.mark.parametrize(("first", "second"), [({}, {}), ({"amount_minor": 1000}, {"amount_minor": 1500})])
def test_a_second_run_for_a_refunded_order_fails_before_anyone_approves_it(tenant, sandbox, first, second):
    """A second run for an order refunded by another run must not take that run's refund for its own
    (the operation id is the order's) and, approved, report "refunded" with the first run's refund
    id; nor a second partial refund sit suspended for good. The second run fails at decide, naming
    the run, before a person is asked."""
    sandbox.order("o-110")
    a = _drive(_start(tenant, "o-110", **first))
    approval_approve(approval_id=Approval.objects.get(run=a).approval_id, actor="user:sam")
    a = _drive(a)
    assert a.result["outcome"] == "refunded"
    b = _drive(_start(tenant, "o-110", **second))
    assert (b.status, b.result["code"]) == ("failed", "order_refunded_by_another_run")
    assert str(a.run_id) in b.result["detail"] and not Approval.objects.filter(run=b).exists()
    assert len(sandbox.ledger("o-110")) == 1 and not ToolOperation.objects.filter(run=b).exists()


def test_a_run_that_reaches_another_runs_refund_operation_is_suspended_not_credited(tenant, sandbox):
    """Two runs for one order both past decide (neither had refunded yet): the first refunds; the
    second, approved, finds the order's operation prepared by a run it was not forked from and is
    suspended (operation_of_another_run) instead of reporting that run's refund as its own."""
    sandbox.order("o-111")
    a, b = _drive(_start(tenant, "o-111")), _drive(_start(tenant, "o-111"))
    for run in (a, b):
        approval_approve(approval_id=Approval.objects.get(run=run).approval_id, actor="user:sam")
    a, b = _drive(a), _drive(b)
    assert a.result["outcome"] == "refunded"
    assert (b.status, b.suspend_reason) == ("suspended", "operation_of_another_run")
    assert str(a.run_id) in b.suspend_detail and len(sandbox.ledger("o-111")) == 1
    assert list(ToolOperation.objects.values_list("run_id", flat=True)) == [a.run_id]


def test_an_expired_approval_is_not_used_after_resume(tenant, sandbox):
    sandbox.order("o-101")
    run = _drive(_start(tenant, "o-101"))
    approval = Approval.objects.get(run=run, status="pending")
    approval_approve(approval_id=approval.approval_id, actor="user:sam")
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "approval_expired")
    assert sandbox.ledger("o-101") == [] and not ToolOperation.objects.filter(run=run).exists()
    assert Approval.objects.filter(run=run, status="pending").count() == 1  # a new one can be decided


def test_an_approval_for_another_request_digest_is_not_used(tenant, sandbox):
    sandbox.order("o-102")
    run = _drive(_start(tenant, "o-102"))
    approval = Approval.objects.get(run=run, status="pending")
    approval_approve(approval_id=approval.approval_id, actor="user:sam")
    Approval.objects.filter(pk=approval.pk).update(request_digest="sha256:" + "0" * 64)
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "approval_digest_mismatch")
    assert sandbox.ledger("o-102") == []


@pytest.mark.parametrize(
    ("order", "payload", "code"),
    [
        (None, {"order_id": "o-missing"}, "order_not_found"),
        ({"currency": "USD"}, {"order_id": "o-103", "currency": "EUR"}, "currency_mismatch"),
        ({}, {"order_id": "o-103", "amount_minor": 999_999}, "amount_exceeds_refundable"),
    ],
)
def test_bad_orders_fail_the_run_with_a_reason_and_send_no_refund(tenant, sandbox, order, payload, code):
    if order is not None:
        sandbox.order("o-103", **order)
    run = _drive(_start(tenant, payload.pop("order_id"), **payload))
    assert (run.status, run.result["code"]) == ("failed", code)
    assert not ToolOperation.objects.exists()
    if order is not None:
        assert sandbox.ledger("o-103") == []


@pytest.mark.parametrize(
    "payload",
    [
        {"order_id": "o-1", "amount_minor": -5},
        {"order_id": "o-1", "amount_minor": "12.50"},
        {"order_id": "o-1", "currency": "euro"},
        {"order_id": ""},
    ],
)
def test_malformed_refund_input_is_refused_before_anything_is_written(tenant, payload):
    with pytest.raises(InvalidInput):
        run_start(tenant=tenant, workflow_name="refund", input=payload, actor="test")
    assert not AgentRun.objects.exists()


def test_an_undelivered_order_is_denied_without_a_refund(tenant, sandbox):
    sandbox.order("o-104", status="shipped", delivered_at=None)
    run = _drive(_start(tenant, "o-104"))
    assert run.status == "completed" and run.result["outcome"] == "denied"
    assert sandbox.ledger("o-104") == []


@pytest.mark.parametrize("fault", ["error_before_apply", "drop_after_apply", "slow_response"])
def test_an_ambiguous_answer_is_unknown_then_reconciled_and_applied_once(tenant, sandbox, settings, fault):
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-105")
    sandbox.fault(fault, order_id="o-105", remaining=1, delay_s=3)
    run = _drive(_start(tenant, "o-105"))
    assert run.status == "completed", run.suspend_detail
    assert len(sandbox.ledger("o-105")) == 1
    op = ToolOperation.objects.get(run=run)
    statuses = [h["status"] for h in op.history]
    assert statuses[:3] == ["prepared", "started", "unknown"] and statuses[-1] == "succeeded"
    assert AgentEvent.objects.filter(run=run, event_type="step_error", step_id="refund").count() == 1


def test_a_non_authoritative_lookup_suspends_and_never_retries_then_a_person_reconciles(
    tenant, sandbox, settings
):
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-106")
    sandbox.fault("drop_after_apply", order_id="o-106", remaining=1)
    sandbox.fault("lookup_non_authoritative")
    run = _drive(_start(tenant, "o-106"))
    assert (run.status, run.suspend_reason) == ("suspended", "reconciliation_required")
    op = ToolOperation.objects.get(run=run)
    assert (op.status, op.attempts) == ("unknown", 1)
    [refund] = sandbox.ledger("o-106")
    assert _drive(run).status == "suspended"  # nothing moves it but a person
    operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-106",
        actor="user:ana",
        note="PSP shows the refund",
        outcome="applied",
        external_ref=refund["refund_id"],
    )
    run = _drive(run)
    assert run.status == "completed" and run.result["refund_id"] == refund["refund_id"]
    assert len(sandbox.ledger("o-106")) == 1


def test_a_reconciliation_that_names_the_wrong_refund_is_caught_and_said_as_such(tenant, sandbox, settings):
    """Reconciling as applied with a made-up reference suspends the run naming the two ids that
    differ, not saying the ledger shows 1 refund, "expected exactly one"."""
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-107")
    sandbox.fault("drop_after_apply", order_id="o-107", remaining=1)
    sandbox.fault("lookup_non_authoritative")
    run = _drive(_start(tenant, "o-107"))
    assert run.suspend_reason == "reconciliation_required"
    [refund] = sandbox.ledger("o-107")
    operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-107",
        actor="user:ana",
        note="typed the reference by hand",
        outcome="applied",
        external_ref="rf_made_up",
    )
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "verification_failed")
    assert refund["refund_id"] in run.suspend_detail and "rf_made_up" in run.suspend_detail
    assert "expected exactly one" not in run.suspend_detail and len(sandbox.ledger("o-107")) == 1
