"""Correcting a wrong reconciliation: the refund workflow against the payments sandbox over real HTTP,
its run driven in this process. The run goes back to the step that made the call and finishes with
the corrected record, nothing sent again (or, corrected to "not applied", sent once); the earlier
reconciliation stays on record; every refusal says why, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from console.models import Membership
from core.api_auth import api_key_create
from core.errors import ApplicationError
from runs.engine.operations import (
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
    operation_reconcile,
)
from runs.engine.reconciliation import operation_reconciliation_correct, operation_reconciliations
from runs.engine.runs import run_start, run_suspend
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.runs.workflows.test_refund_workflow import Sandbox, _drive
from tests.runs.workflows.test_refund_workflow import _start as _start_refund

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sandbox(live_server, settings) -> Sandbox:
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    settings.KEEPER_RETRY_BACKOFF = 0
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    return Sandbox(settings.KEEPER_SANDBOX_URL)


def _stopped_at_verify(tenant, sandbox: Sandbox, order: str, fault: str = "drop_after_apply") -> AgentRun:
    """A refund whose send went wrong (`fault`), whose lookup cannot say, reconciled by a person as
    applied with a reference that is not the provider's: the run stops at verify."""
    sandbox.order(order)
    sandbox.fault(fault, order_id=order, remaining=1)
    sandbox.fault("lookup_non_authoritative")
    run = _drive(_start_refund(tenant, order))
    assert run.suspend_reason == "reconciliation_required", run.suspend_detail
    operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id=f"refund:{order}",
        actor="user:ana",
        note="the provider's support read the reference to me",
        outcome="applied",
        external_ref="rf_misheard",
    )
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "verification_failed"), run.suspend_detail
    return run


def _correct(tenant, order: str, **kwargs: Any) -> Any:
    return operation_reconciliation_correct(
        tenant_id=tenant.tenant_id,
        operation_id=f"refund:{order}",
        actor=kwargs.pop("actor", "user:bo"),
        note=kwargs.pop("note", "the ledger lists the refund under another id"),
        **kwargs,
    )


def _events(run: AgentRun, event_type: str) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(run=run, event_type=event_type).order_by("seq"))


def test_a_wrong_reference_corrected_to_the_providers_record_completes_without_sending_again(tenant, sandbox):
    run = _stopped_at_verify(tenant, sandbox, "o-201")
    [refund] = sandbox.ledger("o-201")
    correction = _correct(
        tenant,
        "o-201",
        outcome="applied",
        external_ref=refund["refund_id"],
        expected_revision=run.state_revision,
    )
    assert correction.reference_check == "among the provider's records" and correction.step == "refund"
    assert (correction.replaced.actor, correction.replaced.external_ref) == ("user:ana", "rf_misheard")
    run.refresh_from_db()
    # Back at the step that made the call, with the state it began from, and asked to go on.
    assert (run.status, run.suspend_reason, run.next_step) == (
        "suspended",
        "reconciliation_corrected",
        "refund",
    )
    assert run.resume_requested_by == "user:bo" and "refund" not in run.state
    [event] = _events(run, "reconciliation_corrected")
    assert event.payload["corrects"]["external_ref"] == "rf_misheard" and event.state == run.state
    run = _drive(run)
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail)
    assert (run.result["outcome"], run.result["refund_id"]) == ("refunded", refund["refund_id"])
    # One refund at the provider, and Keeper sent the request once: the step read the corrected record.
    assert len(sandbox.ledger("o-201")) == 1
    op = ToolOperation.objects.get(operation_id="refund:o-201")
    assert (op.status, op.external_ref, op.attempts) == ("succeeded", refund["refund_id"], 1)
    assert [h["status"] for h in op.history].count("started") == 1
    assert op.history[-1]["corrects"] == {"status": "succeeded", "external_ref": "rf_misheard"}
    # Both reconciliations are kept, the first as it was written.
    assert [(r.kind, r.actor, r.external_ref) for r in operation_reconciliations(op=op)] == [
        ("operation_reconciled", "user:ana", "rf_misheard"),
        ("reconciliation_corrected", "user:bo", refund["refund_id"]),
    ]
    # The refund step ran twice (the second read the corrected record); the log has no gap.
    assert [e.step_id for e in _events(run, "step_completed")].count("refund") == 2
    seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1))


def test_corrected_to_not_applied_where_the_provider_has_nothing_the_run_sends_it_once(tenant, sandbox):
    run = _stopped_at_verify(tenant, sandbox, "o-202", fault="error_before_apply")
    assert sandbox.ledger("o-202") == [] and "shows 0 refund(s)" in run.suspend_detail
    _correct(tenant, "o-202", outcome="not_applied", note="the provider holds no refund for it")
    op = ToolOperation.objects.get(operation_id="refund:o-202")
    assert (op.status, op.external_ref) == ("prepared", None)
    run = _drive(run)
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail)
    [refund] = sandbox.ledger("o-202")
    assert run.result["refund_id"] == refund["refund_id"]
    op.refresh_from_db()
    since = [h["status"] for h in op.history][
        [h.get("corrects") is not None for h in op.history].index(True) :
    ]
    assert since == ["prepared", "started", "succeeded"]  # sent once after the correction


def test_refusals_say_why_and_write_nothing(tenant, sandbox):
    run = _stopped_at_verify(tenant, sandbox, "o-203")
    [refund] = sandbox.ledger("o-203")
    revision = run.state_revision

    def refused(**kwargs: Any) -> tuple[str, int]:
        with pytest.raises(ApplicationError) as caught:
            _correct(tenant, "o-203", **kwargs)
        return caught.value.code, caught.value.http_status

    assert refused(outcome="applied", external_ref="rf_nowhere") == ("unknown_reference", 422)
    assert refused(outcome="applied", external_ref="rf_misheard") == ("nothing_to_correct", 422)
    assert refused(outcome="applied", external_ref=refund["refund_id"], note=" ") == ("note_required", 422)
    stale = dict(outcome="applied", external_ref=refund["refund_id"], expected_revision=revision - 1)
    assert refused(**stale) == ("stale_revision", 409)
    run.refresh_from_db()
    assert run.state_revision == revision and not _events(run, "reconciliation_corrected")
    assert ToolOperation.objects.get(operation_id="refund:o-203").external_ref == "rf_misheard"
    # A reference the records do not list is taken when the person says they checked it; the same
    # correction sent twice (a double click) is done once.
    twice = dict(outcome="applied", external_ref="rf_from_the_phone", checked_by_hand=True)
    assert _correct(tenant, "o-203", expected_revision=revision, **twice).reference_check == "checked by hand"
    with pytest.raises(ApplicationError) as again:
        _correct(tenant, "o-203", expected_revision=revision, **twice)
    assert again.value.code == "stale_revision" and "nothing was done twice" in again.value.message
    assert len(_events(run, "reconciliation_corrected")) == 1
    # While the resume it asked for waits for a worker, nothing corrects it again.
    run.refresh_from_db()
    fresh = dict(outcome="applied", external_ref=refund["refund_id"], expected_revision=run.state_revision)
    assert refused(**fresh) == ("resume_pending", 409)
    run = _drive(run)  # back at verify: the ledger's refund is not rf_from_the_phone
    assert run.suspend_reason == "verification_failed"
    _correct(
        tenant, "o-203", outcome="applied", external_ref=refund["refund_id"]
    )  # a correction's correction
    run = _drive(run)
    assert run.status == "completed"
    assert refused(outcome="not_applied") == ("run_not_suspended", 409)  # a finished run never goes back


def test_an_outcome_the_tool_settled_or_still_in_doubt_is_not_a_persons_to_correct(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    grant = apply(m.LeaseTaken(run_id=run.run_id, tenant_id=run.tenant_id, owner="w1", ttl=30))
    assert grant is not None
    for order in ("o-207", "o-208"):
        ids = {"tenant_id": tenant.tenant_id, "operation_id": f"refund:{order}", "actor": "w1"}
        operation_prepare_once(
            **ids,
            run_id=run.run_id,
            step_id="refund",
            tool_name="payments.refund",
            tool_contract_version="payments.v1",
            request={"order_id": order},
        )
        operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
    operation_mark_succeeded(
        tenant_id=tenant.tenant_id, operation_id="refund:o-207", actor="w1", external_ref="rf_1", result={}
    )
    operation_mark_unknown(
        tenant_id=tenant.tenant_id, operation_id="refund:o-208", actor="w1", note="timeout"
    )
    run_suspend(run_id=run.run_id, actor="user:ana", reason="operator_pause")
    for order, said in (("o-207", "the tool's own answer"), ("o-208", "reconcile it instead")):
        with pytest.raises(ApplicationError) as caught:
            _correct(tenant, order, outcome="applied", external_ref="rf_2", checked_by_hand=True)
        assert caught.value.code == "operation_not_reconciled" and said in caught.value.message
    assert not AgentEvent.objects.filter(run_id=run.run_id, event_type="reconciliation_corrected").exists()


def test_the_api_corrects_with_reason_codes_and_needs_the_support_role(tenant, sandbox):
    run = _stopped_at_verify(tenant, sandbox, "o-206")
    [refund] = sandbox.ledger("o-206")
    op = ToolOperation.objects.get(operation_id="refund:o-206")
    url = f"/api/v1/operations/{op.pk}/correct-reconciliation"
    engineer = get_user_model().objects.create_user("eng", password="pw-for-tests", is_staff=True)
    engineer.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=engineer, tenant=tenant)
    session = APIClient()
    session.force_authenticate(engineer)
    body = {"outcome": "applied", "external_ref": refund["refund_id"], "note": "the ledger lists it"}
    assert session.post(url, body, format="json").status_code == 403
    key = APIClient()
    key.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='ci', scope='write').plaintext}"
    )
    unknown = key.post(url, {**body, "external_ref": "rf_nowhere"}, format="json")
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_reference"
    assert refund["refund_id"] in unknown.json()["error"]["details"]["provider_refs"]
    stale = key.post(url, {**body, "expected_revision": run.state_revision + 5}, format="json")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_revision"
    assert key.post(url, {**body, "resme": True}, format="json").status_code == 400
    done = key.post(url, {**body, "expected_revision": run.state_revision}, format="json")
    assert done.status_code == 200, done.content
    answer = done.json()
    assert (answer["operation"]["external_ref"], answer["step"]) == (refund["refund_id"], "refund")
    assert answer["corrects"]["external_ref"] == "rf_misheard"
    assert answer["reference_check"] == "among the provider's records"
    again = key.post(url, {**body, "expected_revision": run.state_revision}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "stale_revision"
    run = _drive(run)
    assert run.status == "completed" and run.result["refund_id"] == refund["refund_id"]
