"""Support's whole job on the demo, in a real browser at laptop and phone width: read a customer's
conversation and decide the agent's proposal beside it, approve a refund and a credit limit, reconcile
the refund nobody knows about (and correct a wrong reconciliation of it), answer the LangGraph graphs
every way Agent Inbox offers, and see what only an engineer can fix said so."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runs.kernel.models import AgentRun, ToolOperation
from tests.console.journeys.conftest import eventually

pytestmark = [pytest.mark.journeys, pytest.mark.slow]
SUPPORT = "acme-support"
POLLED = 15_000  # ms: the pages poll every 3 s; a worker moves the run meanwhile


def _run(demo, name: str) -> AgentRun:
    with demo.db(demo.tenant_id("acme")):
        return AgentRun.objects.get(run_id=demo.runs[name])


def test_support_reads_the_conversation_and_rejects_the_agents_proposal(person, demo):
    who = person(SUPPORT)
    who.visit("/support/")
    row = who.page.locator("#approvals tr", has_text="ord-1003")
    expect(row).to_contain_text("cust-1003")
    who.click("Review", within=row)
    # The conversation as a conversation, beside the decision: who said what, the tool calls folded.
    talk = who.page.locator("#conversation")
    expect(talk.locator(".said.customer").first).to_contain_text("I prefer email for updates")
    expect(talk.locator(".said.customer").last).to_contain_text("Order ord-1003 arrived damaged")
    expect(talk.locator(".said.agent").first).to_be_visible()
    expect(talk.locator("details.tool-call").first).not_to_have_attribute("open", "")
    expect(talk.locator(".proposal")).to_contain_text("35.00 EUR")
    assert "{" not in talk.locator(".said").first.inner_text()  # words, not JSON
    expect(who.page.locator("#decide textarea")).to_have_count(1)  # one note box for both buttons
    who.shot("support-conversation-approval")
    who.page.fill("#decision-note", "the order was delivered intact according to the courier")
    who.click("Reject")
    expect(who.page.locator("ul.messages")).to_contain_text("Rejected")
    expect(who.page.locator("[data-approval-status]")).to_have_text("rejected")
    # The agent goes on with the person's decision and tells the customer.
    eventually(
        lambda: _run(demo, "support_agent").suspend_reason == "awaiting_input", demo, "the agent to reply"
    )
    who.visit(f"/support/runs/{demo.runs['support_agent']}/")
    expect(who.page.locator("#conversation .said.agent").last).to_contain_text("not", timeout=POLLED)
    who.shot("support-conversation-after")


def test_support_approves_the_refund_and_the_run_completes(person, demo):
    who = person(SUPPORT)
    who.visit("/support/")
    row = who.page.locator("#approvals tr", has_text="ord-1001")
    expect(row).to_contain_text("Refund 49.99 EUR for order ord-1001")
    who.click("Review", within=row)
    expect(who.page.locator("h1")).to_have_text("Refund 49.99 EUR for order ord-1001")
    expect(who.page.locator("#request-facts")).to_contain_text("arrived broken")
    expect(who.page.locator("#history")).to_contain_text("lookup_order")
    who.page.fill("#decision-note", "photos of the broken item checked")
    who.click("Approve refund")
    expect(who.page.locator("ul.messages")).to_contain_text("Approved")
    eventually(lambda: _run(demo, "awaiting_approval").status == "completed", demo, "the refund to complete")
    expect(who.page.locator("[data-run-status]")).to_have_attribute(
        "data-run-status", "completed", timeout=POLLED
    )
    expect(who.page.locator("#run-status")).to_contain_text("refunded")


def test_support_approves_a_credit_limit_as_its_workflow_declared_it(person, demo):
    who = person(SUPPORT)
    who.visit("/support/")
    row = who.page.locator("#approvals tr", has_text="credit limit")
    expect(row).to_contain_text("2,500.00 EUR")
    who.click("Review", within=row)
    page = who.page
    expect(page.locator("h1")).to_contain_text("credit limit")
    expect(page.locator("#request-facts")).not_to_contain_text("Refund")
    expect(page.locator("#request-facts")).not_to_contain_text("null")
    # The customer once (the workflow declares it), and the run's input in words and money.
    expect(page.locator("#request-facts dd", has_text="cust-1001")).to_have_count(1)
    expect(page.locator("#history")).to_contain_text("current limit")
    expect(page.locator("#history")).to_contain_text("1,000.00 EUR")
    expect(page.locator("#history")).not_to_contain_text("_minor")
    who.shot("support-credit-approval")
    page.fill("#decision-note", "income documents on file")
    who.click("Approve the new limit")
    expect(page.locator("[data-approval-status]")).to_have_text("approved")


def test_support_reconciles_the_refund_in_doubt_then_corrects_a_wrong_reference(person, demo):
    """The reference is checked against the provider's records; one confirmed by ticking that is
    wrong stops the run at verify, and the person corrects it to the provider's record: the run
    goes back to the refund step and completes with it, nothing sent again."""
    who = person(SUPPORT)
    page = who.page
    who.visit("/support/")
    who.click("Reconcile", within=page.locator("#operations tr", has_text="ord-1002"))
    card = page.locator("#lookup-card")
    expect(card).to_contain_text("looked it up")  # the worker's own lookup, not "not looked up yet"
    expect(card).not_to_contain_text("Not looked up yet")
    who.click("Look up again", within=card)
    expect(card).to_contain_text("Looked up just now")  # swapped in place
    expect(card).to_contain_text("not authoritative")
    # The provider's own record, shown and linked: the reference to type is there.
    record = page.locator("#provider-records")
    expect(record.get_by_role("link", name="open the provider's record")).to_have_count(1)
    reference = record.locator("[data-external-ref]").first.inner_text().strip()
    expect(record).to_contain_text("129.00 EUR")  # the provider's amount as money, not minor units
    expect(record).not_to_contain_text("amount_minor")
    page.check("input[name=outcome][value=applied]")
    page.fill("#id_external_ref", "rf_typo")
    page.fill("#id_note", "the provider's ledger shows the refund")
    with who.expecting(422):
        who.click(page.get_by_role("button", name="Reconcile"))
    expect(page.locator("#lookup-card")).to_contain_text("not among the provider's records")
    # Sure of the typo, the person ticks that they checked it: taken, and wrong.
    page.check("input[name=checked_by_hand]")
    page.fill("#id_note", "the provider's support read it to me on the phone")
    who.click(page.get_by_role("button", name="Reconcile"))
    expect(page.locator("ul.messages")).to_contain_text("Reconciled")
    eventually(
        lambda: _run(demo, "unknown_operation").suspend_reason == "verification_failed",
        demo,
        "the refund's verify to stop the run",
    )
    who.visit(f"/support/runs/{demo.runs['unknown_operation']}/")
    correct = page.locator("#correct-reconciliation")
    expect(correct).to_contain_text("A reconciliation may be wrong")
    who.click("Correct the reconciliation", within=correct)
    expect(page.locator("#reconciliations")).to_contain_text("rf_typo")
    form = page.locator("#correct-form")
    form.locator(f"input[name=correct-pick][value='{reference}']").check()
    page.fill("#id_correct-note", "rf_typo was misheard; the provider's ledger lists the refund")
    who.shot("support-correct-reconciliation")
    who.click(page.get_by_role("button", name="Correct the reconciliation"))
    expect(page.locator("ul.messages")).to_contain_text("Corrected")
    # Both reconciliations on the page, the first kept and marked replaced.
    rows = page.locator("#reconciliations tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("replaced")
    expect(rows.last).to_contain_text(reference)
    eventually(lambda: _run(demo, "unknown_operation").status == "completed", demo, "the refund to complete")
    with demo.db(demo.tenant_id("acme")):
        assert ToolOperation.objects.get(run_id=demo.runs["unknown_operation"]).external_ref == reference
    assert _run(demo, "unknown_operation").result["refund_id"] == reference


@pytest.mark.parametrize(
    ("way", "thread", "said"),
    [
        ("accept", "demo-support-1", "is approved"),
        ("edit", "demo-support-2", "20.00 EUR"),
        ("respond", "demo-support-3", "We will call you tomorrow"),
        ("ignore", "demo-support-4", "a colleague"),
    ],
)
def test_support_answers_a_graph_the_way_agent_inbox_offers(person, demo, way, thread, said):
    who = person(SUPPORT)
    page = who.page
    who.visit("/support/")
    who.click("Answer", within=page.locator("#questions tr", has_text=thread))
    inbox = page.locator("#langgraph-question")
    expect(inbox.locator(".action-request")).to_contain_text("refund")
    expect(inbox.locator(".said .who").first).to_have_css("display", "block")  # "The customer said", apart
    if way == "accept":
        who.click(inbox.get_by_role("button", name="Accept"))
    elif way == "edit":
        inbox.locator("details.edit summary").click()
        inbox.locator("input[name='arg:amount_minor']").fill("2000")
        who.click(inbox.get_by_role("button", name="Send the edit"))
    elif way == "respond":
        inbox.locator("details.respond summary").click()
        inbox.locator("textarea[name=response]").fill("We will call you tomorrow about the refund.")
        who.click(inbox.get_by_role("button", name="Send the response"))
    else:
        who.click(inbox.get_by_role("button", name="Ignore"))
    expect(page.locator("ul.messages")).to_contain_text("Answered")
    # The graph went on with the answer, and the page says what it replied.
    went_on = page.locator("#langgraph-reply")
    expect(went_on).to_contain_text(said, timeout=60_000)
    expect(went_on.locator("time[datetime]")).to_have_count(1)  # the checkpoint's time in the one format
    expect(page.locator("[data-run-status]")).not_to_contain_text("suspended")
    who.shot(f"support-langgraph-{way}")


def test_what_only_an_engineer_can_fix_says_so(person, demo):
    who = person(SUPPORT)
    page = who.page
    who.visit("/support/")
    section = page.locator("#engineer-only")
    expect(section).to_contain_text("changed outside Keeper")
    assert "sha256:" not in section.inner_text()
    who.click("Open", within=section.locator("tr", has_text="changed outside Keeper"))
    expect(page.locator("#engineer-only-notice")).to_contain_text("an engineer")
    expect(page.get_by_role("button", name="Resume")).to_have_count(0)
    assert "sha256:" not in page.locator("main").inner_text()
