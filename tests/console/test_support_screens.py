"""The support screens read as what they are: an approval as its workflow declared it (or every field
of its request, plainly), one note box for both decisions, the conversation beside an agent's proposal,
an approval an erasure closed said so, and the reference typed at a reconciliation checked against the
payments provider's own records (or typed twice when nothing can check it)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.models import AuditEntry
from erasure.services import erasure_execute, erasure_request_create
from runs.conversations.messages import conversation_append
from runs.engine.approvals import approval_check
from runs.engine.runs import run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel.models import AgentRun, Approval, ToolOperation
from tests.runs.workflows.test_refund_workflow import _drive, _start, sandbox  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db


def _advance(run: AgentRun, limit: int = 10) -> AgentRun:
    for _ in range(limit):
        if run_advance(run_id=run.run_id, worker_id="w-test").outcome != "committed":
            break
    run.refresh_from_db()
    return run


def _credit(tenant, customer: str = "c-9", requested: int = 250_000) -> AgentRun:
    started = run_start(
        tenant=tenant,
        workflow_name="demo.credit",
        subject=customer,
        actor="test",
        input={
            "customer_id": customer,
            "current_limit_minor": 100_000,
            "requested_limit_minor": requested,
            "currency": "EUR",
        },
    ).run
    return _advance(started)


def test_an_approval_reads_as_its_workflow_declared_it(as_role, tenant):
    run = _credit(tenant)
    assert run.suspend_reason == "approval_required"
    approval = Approval.objects.get(run=run, status="pending")
    support = as_role("support")
    inbox = support.get(reverse("console:support_inbox")).content.decode()
    assert "Raise the credit limit of c-9 to 2,500.00 EUR" in inbox
    page = support.get(reverse("console:support_approval", args=[approval.approval_id])).content.decode()
    assert '<h1 dir="auto">Raise the credit limit of c-9 to 2,500.00 EUR</h1>' in page
    for label, value in (
        ("Current limit", "1,000.00 EUR"),
        ("New limit", "2,500.00 EUR"),
        ("Increase", "1,500.00 EUR"),
    ):
        assert f'<dt dir="auto">{label}</dt>' in page and value in page
    assert "Approve the new limit" in page and "Keep the current limit" in page
    # Not a refund's words, and no amount read from fields that are not one.
    facts = page[page.index('id="request-facts"') : page.index('id="decide"')]
    assert "Refund" not in page and "null" not in facts and "not a whole amount" not in page


def test_an_undeclared_approval_shows_every_field_plainly_and_assumes_no_refund(as_role, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="approval_required")
    approval = approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="limit",
        request={"customer": "c-7", "limit_minor": 250_000, "note": None},
        request_digest="sha256:" + "cd" * 32,
        reasons=["a good customer"],
        actor="w1",
    ).approval
    page = (
        as_role("support")
        .get(reverse("console:support_approval", args=[approval.approval_id]))
        .content.decode()
    )
    assert "Approval asked by demo.countdown at step limit" in page
    assert '<dt dir="auto">customer</dt><dd dir="auto">c-7</dd>' in page
    assert '<dt dir="auto">limit_minor</dt><dd dir="auto">250000</dd>' in page
    assert "Refund" not in page and "not a whole amount" not in page and "null EUR" not in page
    assert "does not say how its approvals read" in page


def test_one_note_box_serves_both_decisions(as_role, tenant):
    run = _credit(tenant)
    approval = Approval.objects.get(run=run, status="pending")
    support = as_role("support")
    url = reverse("console:support_approval", args=[approval.approval_id])
    page = support.get(url).content.decode()
    assert page.count("<textarea") == 1 and 'id="decision-note"' in page
    reject = reverse("console:support_approval_reject", args=[approval.approval_id])
    assert f'formaction="{reject}"' in page  # the second button sends the same note elsewhere
    response = support.post(reject, {"note": "income not verified"})
    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.note) == ("rejected", "income not verified")


@pytest.mark.django_db(transaction=True)
def test_an_agents_proposal_is_shown_beside_the_conversation_in_words(as_role, tenant, sandbox):  # noqa: F811
    sandbox.order("o-300", customer_id="c-300", amount_minor=3500)
    run = _advance(
        run_start(tenant=tenant, workflow_name="support_agent", subject="c-300", input={}, actor="t").run
    )
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m-1",
        body={"content": "Order o-300 arrived damaged. Can I get a refund?"},
        actor="user:c-300",
    )
    run = _advance(run)
    approval = Approval.objects.get(run=run, status="pending")
    page = (
        as_role("support")
        .get(reverse("console:support_approval", args=[approval.approval_id]))
        .content.decode()
    )
    talk = page[page.index('id="conversation"') :]
    assert 'class="said customer"' in talk and "Order o-300 arrived damaged. Can I get a refund?" in talk
    assert '<details class="tool-call">' in talk and "lookup_order" in talk  # folded, not open
    assert "The agent proposes, and waits for a person" in talk and "35.00 EUR" in talk
    assert '"content"' not in talk  # words, not the events' JSON


@pytest.mark.django_db(transaction=True)
def test_an_approval_an_erasure_closed_says_so_instead_of_disappearing(as_role, tenant, sandbox):  # noqa: F811
    sandbox.order("o-301", customer_id="c-301")
    run = run_start(
        tenant=tenant, workflow_name="refund", subject="c-301", input={"order_id": "o-301"}, actor="test"
    ).run
    run = _drive(run)
    approval = Approval.objects.get(run=run, status="pending")
    erasure = erasure_request_create(tenant=tenant, subject_id="c-301", requested_by="user:compliance")
    erasure_execute(tenant_id=tenant.tenant_id, request_id=erasure.request_id)
    assert AgentRun.objects.get(run_id=run.run_id).suspend_reason == "subject_erased"
    support = as_role("support")
    inbox = support.get(reverse("console:support_inbox")).content.decode()
    closed = inbox[inbox.index('id="closed-by-erasure"') : inbox.index('id="operations"')]
    assert f'data-approval="{approval.approval_id}"' in closed and "for good" in closed
    page = support.get(reverse("console:support_approval", args=[approval.approval_id])).content.decode()
    assert "its customer's data was erased" in page and 'id="decision-note"' not in page


def _unknown_refund(tenant, sandbox, order_id: str) -> ToolOperation:  # noqa: F811
    sandbox.order(order_id)
    sandbox.fault("drop_after_apply", order_id=order_id, remaining=1)
    sandbox.fault("lookup_non_authoritative")
    run = _drive(_start(tenant, order_id))
    return ToolOperation.objects.get(run=run)


@pytest.mark.django_db(transaction=True)
def test_a_typed_reference_is_checked_against_the_providers_records(as_role, tenant, sandbox, settings):  # noqa: F811
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    op = _unknown_refund(tenant, sandbox, "o-302")
    [refund] = sandbox.ledger("o-302")
    support = as_role("support")
    page = support.get(reverse("console:support_operation", args=[op.pk])).content.decode()
    assert 'id="provider-records"' in page and refund["refund_id"] in page
    assert "/sandbox/refunds?order_id=o-302" in page  # where a person sees the provider's own record
    url = reverse("console:support_operation_reconcile", args=[op.pk])
    form = {"note": "the ledger shows it", "outcome": "applied", "external_ref": "rf_typo", "resume": "on"}
    wrong = support.post(url, form)
    assert wrong.status_code == 422 and "not among the provider&#x27;s records" in wrong.content.decode()
    assert (
        ToolOperation.objects.get(pk=op.pk).status == "unknown"
        and not AuditEntry.objects.filter(action="reconcile").exists()
    )
    # A reference the person checked in the provider's own system, confirmed as such, is recorded.
    right = support.post(url, {**form, "external_ref": refund["refund_id"]})
    assert right.status_code == 302
    [entry] = AuditEntry.objects.filter(action="reconcile")
    assert entry.details["reference_check"] == "among the provider's records"
    assert ToolOperation.objects.get(pk=op.pk).external_ref == refund["refund_id"]


@pytest.mark.django_db(transaction=True)
def test_a_reference_nothing_can_check_is_typed_twice(as_role, tenant, sandbox, settings):  # noqa: F811
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    op = _unknown_refund(tenant, sandbox, "o-303")
    settings.KEEPER_SANDBOX_URL = "http://127.0.0.1:9/sandbox"  # the provider is down now
    support = as_role("support")
    page = support.get(reverse("console:support_operation", args=[op.pk])).content.decode()
    assert "could not be read" in page and 'name="external_ref_again"' in page
    url = reverse("console:support_operation_reconcile", args=[op.pk])
    form = {"note": "PSP dashboard", "outcome": "applied", "external_ref": "rf_1", "resume": "on"}
    once = support.post(url, form)
    assert once.status_code == 422 and "type it again" in once.content.decode()
    twice = support.post(url, {**form, "external_ref_again": "rf_1"})
    assert twice.status_code == 302
    assert AuditEntry.objects.get(action="reconcile").details["reference_check"] == "typed twice"
