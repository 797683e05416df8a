"""The support screens in a real browser (Debian's chromium through Playwright) against a live server
that also serves the payments sandbox: approving a refund, reconciling an unknown refund, and
hostile content. The worker's part is driven in-process (run_advance) between the clicks; the
pages pick the new state up by their htmx polling."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from console.models import AuditEntry
from runs.engine.approvals import approval_check
from runs.engine.runs import run_start, run_suspend
from runs.kernel.models import Approval, ToolOperation
from tests.console.conftest import dialogs_dismissed, screenshot
from tests.runs.workflows.test_refund_workflow import _drive, _start, sandbox  # noqa: F401 - sandbox is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
POLL_TIMEOUT = 10_000  # ms: the pages poll every 3 s


def _messages(page: Any) -> Any:
    return page.locator("ul.messages")


def test_support_approves_a_refund_and_the_run_completes(page_as, sandbox, tenant):  # noqa: F811
    sandbox.order("o-700")
    run = _drive(_start(tenant, "o-700", reason="arrived broken"))
    assert (run.status, run.suspend_reason) == ("suspended", "approval_required")
    approval = Approval.objects.get(run=run, status="pending")

    page = page_as("support")
    page.goto("/support/")
    row = page.locator(f'tr[data-approval="{approval.approval_id}"]')
    expect(row).to_contain_text("25.00 EUR")
    expect(row).to_contain_text("o-700")
    expect(row).to_contain_text("expires in 23 h 59 min")
    expect(row).to_contain_text("arrived broken")
    screenshot(page, "support-inbox")

    row.get_by_role("link", name="Review").click()
    page.wait_for_url(f"**/support/approvals/{approval.approval_id}/")
    expect(page.locator("h1")).to_contain_text("o-700")
    screenshot(page, "support-approval")
    page.fill("#approve-note", "customer sent photos of the damage")
    page.get_by_role("button", name="Approve refund").click()
    expect(_messages(page)).to_contain_text("Approved")
    expect(page.locator("[data-approval-status]")).to_have_text("approved")

    page.goto("/support/")  # the approved run now waits for a worker, then leaves the inbox
    expect(page.locator(f'tr[data-approval="{approval.approval_id}"]')).to_have_count(0)
    waiting = page.locator(f'#other tr[data-run="{run.run_id}"]')
    expect(waiting).to_contain_text("waiting for a worker")
    assert _drive(run).status == "completed"  # the worker's part
    expect(waiting).to_have_count(0, timeout=POLL_TIMEOUT)  # by polling, without a reload
    page.goto(f"/support/approvals/{approval.approval_id}/")
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "completed")
    expect(page.locator("#run-status")).to_contain_text("refunded")
    screenshot(page, "support-approval-completed")
    assert len(sandbox.ledger("o-700")) == 1
    [entry] = AuditEntry.objects.filter(action="approve")
    assert (entry.actor, entry.target_id, entry.note) == (
        "user:support",
        str(approval.approval_id),
        "customer sent photos of the damage",
    )


def test_support_reconciles_an_unknown_operation_and_the_run_continues(page_as, sandbox, tenant, settings):  # noqa: F811
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 10**9
    sandbox.order("o-701")
    sandbox.fault("drop_after_apply", order_id="o-701", remaining=1)  # applied, then the answer is lost
    sandbox.fault("lookup_non_authoritative")
    run = _drive(_start(tenant, "o-701"))
    assert (run.status, run.suspend_reason) == ("suspended", "reconciliation_required")
    op = ToolOperation.objects.get(run=run)
    [refund] = sandbox.ledger("o-701")

    page = page_as("support")
    page.goto("/support/")
    row = page.locator(f'tr[data-operation="{op.pk}"]')
    expect(row).to_contain_text("unknown")
    expect(row).to_contain_text("lookup is not authoritative")
    row.get_by_role("link", name="Reconcile").click()
    page.wait_for_url(f"**/support/operations/{op.pk}/")
    page.get_by_role("button", name="Look up again").click()
    expect(page.locator("[data-lookup]")).to_contain_text("not authoritative")
    assert AuditEntry.objects.filter(action="lookup", target_id=str(op.pk)).count() == 1
    screenshot(page, "support-reconcile")

    page.check("input[name=outcome][value=applied]")
    page.fill("input[name=external_ref]", refund["refund_id"])
    page.fill("textarea[name=note]", "the PSP dashboard shows the refund")
    page.get_by_role("button", name="Reconcile", exact=True).click()
    expect(_messages(page)).to_contain_text("Reconciled")
    expect(page.locator("[data-operation-status]")).to_have_text("succeeded")

    assert _drive(run).status == "completed"
    expect(page.locator("[data-run-status]")).to_have_attribute(
        "data-run-status", "completed", timeout=POLL_TIMEOUT
    )
    screenshot(page, "support-reconcile-completed")
    assert len(sandbox.ledger("o-701")) == 1  # applied once, never sent again
    [entry] = AuditEntry.objects.filter(action="reconcile")
    assert (entry.target_type, entry.target_id, entry.details["external_ref"]) == (
        "operation",
        str(op.pk),  # by number: an operation's key can embed a subject's id
        refund["refund_id"],
    )


HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"
RTL = "طلب استرداد عاجل ✅🙂👍🏽"


def _deep(levels: int) -> Any:
    value: Any = HOSTILE
    for i in range(levels):
        value = {f"level{i}": [value, RTL]}
    return value


def test_hostile_content_renders_escaped_and_the_page_stays_usable(page_as, tenant) -> None:
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="approval_required", detail=HOSTILE + "x" * 3000)
    request = {
        "order_id": HOSTILE + RTL,
        "amount_minor": _deep(60),
        "currency": "<b>EUR</b>",
        "memo": "y" * 3000,
    }
    approval = approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request=request,
        request_digest="sha256:" + "f" * 64,
        reasons=[HOSTILE, RTL, "z" * 3000],
        actor="w1",
    ).approval
    page = page_as("support")
    dialogs = dialogs_dismissed(page)

    for url in ("/support/", f"/support/approvals/{approval.approval_id}/"):
        page.goto(url)
        expect(page.locator("main")).to_contain_text("<script>window.__pwned = 1</script>")
        expect(page.locator("main")).to_contain_text(RTL)
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), url
    page.locator("details", has_text="The exact request").locator("summary").click()
    screenshot(page, "support-hostile")

    reject = page.get_by_role("button", name="Reject")
    expect(reject).to_be_visible()
    page.fill("#reject-note", HOSTILE + RTL)
    reject.click()
    expect(_messages(page)).to_contain_text("Rejected")
    expect(page.locator("main")).to_contain_text(HOSTILE + RTL)
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert Approval.objects.get(pk=approval.pk).note == HOSTILE + RTL
