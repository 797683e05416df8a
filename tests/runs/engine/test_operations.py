"""The operation protocol's state machine, enforced by the database, and human reconciliation."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from runs.engine.operations import (
    OperationInFlight,
    OperationRequestChanged,
    OperationStateConflict,
    operation_mark_failed,
    operation_mark_not_applied,
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
    operation_reconcile,
)
from runs.engine.runs import run_start, run_suspend
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition
from runs.kernel.models import AgentEvent, ToolOperation
from runs.kernel.state import EncodedState

pytestmark = pytest.mark.django_db
REQUEST = {"order_id": "o-1", "amount_minor": 500, "currency": "EUR"}


@pytest.fixture
def leased(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    return run, grant


def _prepare(run, tenant, request=REQUEST):
    return operation_prepare_once(
        tenant_id=tenant.tenant_id,
        run_id=run.run_id,
        step_id="refund",
        operation_id="refund:o-1",
        tool_name="payments.refund",
        tool_contract_version="payments.v1",
        request=request,
        actor="w1",
    )


def test_prepare_once_returns_the_same_operation_and_refuses_a_changed_request(leased, tenant):
    run, _ = leased
    first = _prepare(run, tenant)
    again = _prepare(run, tenant)
    assert first == again and first.status == "prepared" and first.tool_contract_version == "payments.v1"
    with pytest.raises(OperationRequestChanged):
        _prepare(run, tenant, {**REQUEST, "amount_minor": 501})
    assert ToolOperation.objects.count() == 1


def test_the_protocol_moves_only_along_its_edges(leased, tenant):
    run, grant = leased
    _prepare(run, tenant)
    ids = {"tenant_id": tenant.tenant_id, "operation_id": "refund:o-1", "actor": "w1"}
    with pytest.raises(OperationStateConflict):
        operation_mark_succeeded(**ids, external_ref="rf_1", result={})  # not started yet
    started = operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
    assert (started.status, started.attempts) == ("started", 1)
    assert operation_mark_unknown(**ids, note="timeout after send").status == "unknown"
    with pytest.raises(OperationStateConflict):
        operation_mark_failed(**ids, result={})  # unknown is never turned into failed
    with pytest.raises(OperationStateConflict):
        operation_mark_started(
            **ids, run_id=run.run_id, lease_epoch=grant.epoch
        )  # not without reconciliation
    done = operation_mark_succeeded(**ids, external_ref="rf_1", result={"refund_id": "rf_1"})
    assert (done.status, done.external_ref) == ("succeeded", "rf_1")
    history = [h["status"] for h in ToolOperation.objects.get().history]
    assert history == ["prepared", "started", "unknown", "succeeded"]


def test_a_worker_without_the_current_lease_cannot_start_the_side_effect(leased, tenant):
    run, grant = leased
    _prepare(run, tenant)
    with pytest.raises(OperationStateConflict):
        operation_mark_started(
            tenant_id=tenant.tenant_id,
            operation_id="refund:o-1",
            actor="w1",
            run_id=run.run_id,
            lease_epoch=grant.epoch + 1,
        )
    with pytest.raises(OperationStateConflict):
        operation_mark_started(
            tenant_id=tenant.tenant_id,
            operation_id="refund:o-1",
            actor="someone-else",
            run_id=run.run_id,
            lease_epoch=grant.epoch,
        )
    assert ToolOperation.objects.get().status == "prepared"


def test_an_authoritative_not_applied_permits_exactly_one_more_start(leased, tenant):
    run, grant = leased
    _prepare(run, tenant)
    ids = {"tenant_id": tenant.tenant_id, "operation_id": "refund:o-1", "actor": "w1"}
    operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
    with pytest.raises(OperationInFlight):  # the call may still be on its way: not trusted yet
        operation_mark_not_applied(**ids, note="lookup: not applied")
    operation_mark_unknown(**ids, note="the call timed out", call_ended=True)  # the worker saw it end
    operation_mark_not_applied(**ids, note="lookup: not applied")
    assert operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch).attempts == 2


def _suspended_with_unknown_operation(leased, tenant):
    run, grant = leased
    _prepare(run, tenant)
    ids = {"tenant_id": tenant.tenant_id, "operation_id": "refund:o-1", "actor": "w1"}
    operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
    operation_mark_unknown(**ids, note="connection dropped")
    run_suspend(run_id=run.run_id, actor="w1", reason="reconciliation_required")
    return run


def test_a_person_reconciles_as_applied_with_an_external_ref_and_the_run_resumes(leased, tenant):
    run = _suspended_with_unknown_operation(leased, tenant)
    op = operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-1",
        actor="user:ana",
        note="found rf_9 in the PSP dashboard",
        outcome="applied",
        external_ref="rf_9",
    )
    assert (op.status, op.external_ref) == ("succeeded", "rf_9")
    run.refresh_from_db()
    assert run.status == "suspended" and run.resume_requested_by == "user:ana"
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (event.event_type, event.actor) == ("operation_reconciled", "user:ana")
    assert (
        event.payload["note"] == "found rf_9 in the PSP dashboard" and event.payload["outcome"] == "applied"
    )


def test_a_person_confirms_not_applied_which_allows_one_retry(leased, tenant):
    run = _suspended_with_unknown_operation(leased, tenant)
    op = operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-1",
        actor="user:ana",
        note="no such payment at the PSP",
        outcome="not_applied",
        resume=False,
    )
    assert op.status == "prepared"
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "reconciliation_required")


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"note": " ", "outcome": "applied", "external_ref": "rf"}, "note_required"),
        ({"note": "checked", "outcome": "maybe"}, "invalid_outcome"),
        ({"note": "checked", "outcome": "applied"}, "external_ref_required"),
    ],
)
def test_reconciliation_needs_a_note_a_known_outcome_and_a_ref(leased, tenant, kwargs, code):
    _suspended_with_unknown_operation(leased, tenant)
    with pytest.raises(InvalidInput) as excinfo:
        operation_reconcile(tenant_id=tenant.tenant_id, operation_id="refund:o-1", actor="user:ana", **kwargs)
    assert excinfo.value.code == code
    assert ToolOperation.objects.get().status == "unknown"


def test_reconciling_a_running_run_is_refused_and_changes_nothing(leased, tenant):
    run, grant = leased
    _prepare(run, tenant)
    operation_mark_started(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-1",
        actor="w1",
        run_id=run.run_id,
        lease_epoch=grant.epoch,
    )
    with pytest.raises(InvalidTransition):
        operation_reconcile(
            tenant_id=tenant.tenant_id,
            operation_id="refund:o-1",
            actor="user:ana",
            note="x",
            outcome="applied",
            external_ref="rf",
        )
    assert ToolOperation.objects.get().status == "started"


def test_an_operation_in_doubt_is_still_settled_after_its_subject_was_erased(tenant):
    """Money first: erasure leaves the run stopped, but a refund whose outcome is unknown must still be
    reconciled (recorded on the operation and in the log) without asking the erased run to continue."""
    from erasure.services import erasure_execute, erasure_request_create

    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test", subject="cust-op-77"
    ).run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    _suspended_with_unknown_operation((run, grant), tenant)
    request = erasure_request_create(tenant=tenant, subject_id="cust-op-77", requested_by="t")
    assert erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id).receipt["clean"]
    run.refresh_from_db()
    assert run.suspend_reason == "subject_erased"
    op = operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-1",
        actor="user:ana",
        note="found rf_9 in the PSP dashboard",
        outcome="applied",
        external_ref="rf_9",
    )
    assert (op.status, op.external_ref) == ("succeeded", "rf_9")
    run.refresh_from_db()
    assert (run.status, run.suspend_reason, run.resume_requested_at) == ("suspended", "subject_erased", None)
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (event.event_type, event.payload["outcome"]) == ("operation_reconciled", "applied")


@pytest.mark.parametrize("finish", ["cancel", "complete"])
def test_an_operation_in_doubt_on_a_finished_run_is_in_the_inbox_and_is_settled_there(leased, tenant, finish):
    """An operation left unknown on a run then cancelled (or completed by an outside worker) must not
    be out of every inbox and beyond reconciling (as if only a suspended run could be), or the refund
    stays in doubt for ever and its subject's erasure keeps the key. It is listed, and
    reconciling records the outcome on the finished run, which stays finished and is not resumed."""
    from runs.engine.runs import run_cancel
    from runs.engine.selectors import operation_in_doubt_list
    from runs.webhooks.models import WebhookDelivery, WebhookSubscription

    run, grant = leased
    _prepare(run, tenant)
    ids = {"tenant_id": tenant.tenant_id, "operation_id": "refund:o-1", "actor": "w1"}
    operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
    WebhookSubscription.objects.create(
        tenant=tenant, url="https://hooks.example.com/k", secret="s" * 32, event_types=["run.completed"]
    )
    if finish == "cancel":
        operation_mark_unknown(**ids, note="connection dropped")
        run_cancel(run_id=run.run_id, actor="user:ana", note="customer gave up")
    else:  # as an outside worker's complete did before it was refused
        held = m.Held(run.run_id, run.tenant_id, "w1", grant.epoch, run.state_revision, 1)
        apply(m.Completed(held, EncodedState('{"n": 0}', "x"), "tick", 0, {}))
    run.refresh_from_db()
    status = run.status
    assert status in ("cancelled", "completed")
    deliveries = WebhookDelivery.objects.count()
    assert [op.operation_id for op in operation_in_doubt_list(tenant_ids=[tenant.tenant_id], limit=10)] == [
        "refund:o-1"
    ]
    op = operation_reconcile(
        **{**ids, "actor": "user:ana"},
        note="found rf_9 in the PSP dashboard",
        outcome="applied",
        external_ref="rf_9",
    )
    assert (op.status, op.external_ref) == ("succeeded", "rf_9")
    run.refresh_from_db()
    assert (run.status, run.resume_requested_at) == (status, None)
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (event.event_type, event.actor, event.payload["outcome"]) == (
        "operation_reconciled",
        "user:ana",
        "applied",
    )
    assert WebhookDelivery.objects.count() == deliveries  # a finished run is not announced again
    assert operation_in_doubt_list(tenant_ids=[tenant.tenant_id], limit=10) == []
