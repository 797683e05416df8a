"""The main screens at phone width (390 px) and laptop width (1366 px) in a real browser: nothing is
wider than the window (wide tables scroll inside their box or stack), no cell is squeezed to a
character per line, timestamps stay on one line; each screen is saved as a screenshot at both
widths. At phone width, support approves a refund from the inbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from console.models import AuditEntry
from runs.kernel.models import Approval
from tests.console.conftest import screenshot
from tests.console.test_compliance import SUBJECT, seed_subject
from tests.console.test_engineer import add_event, finish, start, suspended
from tests.runs.workflows.test_refund_workflow import _drive, _start, sandbox  # noqa: F401 - sandbox is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
WIDTHS = {"phone": 390, "laptop": 1366}

# Layout facts, measured in the page: what breaks the layout, as readable strings ([] when fine).
LAYOUT_PROBLEMS = """() => {
  const vw = document.documentElement.clientWidth, problems = [];
  if (document.documentElement.scrollWidth > vw + 1) {
    problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
  }
  const scrolls = (el) => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      if (["auto", "scroll", "hidden"].includes(getComputedStyle(a).overflowX)) return true;
    }
    return false;
  };
  const label = (el) => `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""} "${el.innerText.trim().slice(0, 40)}"`;
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if ((r.right > vw + 1 || r.left < -1) && !scrolls(el)) problems.push(`wider than the window: ${label(el)}`);
  }
  for (const cell of document.querySelectorAll("td, th")) {
    const text = cell.innerText.trim();
    const r = cell.getBoundingClientRect();
    if (text.length < 3 || r.width === 0) continue;
    const s = getComputedStyle(cell);
    const inner = cell.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    if (inner < 1.6 * parseFloat(s.fontSize)) problems.push(`a squeezed cell (${Math.round(inner)} px): ${label(cell)}`);
    if (r.height > 700) problems.push(`a cell ${Math.round(r.height)} px tall: ${label(cell)}`);
  }
  for (const t of document.querySelectorAll("time, .pill, span.nowrap")) {
    const r = t.getBoundingClientRect(), s = getComputedStyle(t);
    const line = parseFloat(s.lineHeight) || 1.45 * parseFloat(s.fontSize);
    if (r.height > 1.9 * line) problems.push(`broken over lines: ${label(t)}`);
  }
  return problems;
}"""


@pytest.fixture
def page_at(page_as) -> Callable[[str, int], Any]:
    return lambda role, width: page_as(role, width=width, height=860)


def check(page: Any, url: str, name: str, width: int) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    screenshot(page, f"{name}-{width}")
    assert page.evaluate(LAYOUT_PROBLEMS) == [], (name, width)


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_the_main_screens_fit_the_window(page_at, tenant, sandbox, width):  # noqa: F811
    sandbox.order("o-900")
    waiting = _drive(_start(tenant, "o-900", reason="arrived broken, the box was open"))
    approval = Approval.objects.get(run=waiting, status="pending")
    done = finish(start(tenant, n=4, key="order-900-retry-with-a-long-idempotency-key"))
    add_event(
        done, "user_message", {"text": "a customer message " * 12}, actor="user:someone.with.a.long.name"
    )
    for _ in range(3):
        suspended(tenant)
    seed_subject(tenant)
    for i in range(5):
        AuditEntry.objects.create(
            tenant=tenant,
            actor="user:support",
            action="approve",
            target_type="run",
            target_id=done.run_id,
            note=f"checked the photos of the parcel, entry {i}",
        )

    support, engineer, compliance = (page_at(role, width) for role in ("support", "engineer", "compliance"))
    check(support, "/support/", "widths-support-inbox", width)
    check(support, f"/support/approvals/{approval.approval_id}/", "widths-support-approval", width)
    check(support, "/audit/", "widths-audit-log", width)
    check(engineer, "/runs/", "widths-run-list", width)
    check(engineer, f"/runs/{done.run_id}/", "widths-run-page", width)
    check(compliance, f"/compliance/?tenant=acme&subject={SUBJECT}", "widths-compliance-subject", width)


def test_support_approves_a_refund_from_the_inbox_at_phone_width(page_at, tenant, sandbox):  # noqa: F811
    sandbox.order("o-901")
    run = _drive(_start(tenant, "o-901", reason="arrived broken"))
    approval = Approval.objects.get(run=run, status="pending")
    page = page_at("support", WIDTHS["phone"])
    page.goto("/support/")
    row = page.locator(f'tr[data-approval="{approval.approval_id}"]')
    expect(row).to_contain_text("25.00 EUR")
    row.get_by_role("link", name="Review").click()
    page.wait_for_url(f"**/support/approvals/{approval.approval_id}/")
    assert page.evaluate(LAYOUT_PROBLEMS) == []
    page.fill("#approve-note", "photos checked on my phone")
    button = page.get_by_role("button", name="Approve refund")
    box = button.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTHS["phone"]
    button.click()
    expect(page.locator("ul.messages")).to_contain_text("Approved")
    expect(page.locator("[data-approval-status]")).to_have_text("approved")
    screenshot(page, "widths-support-approved-390")
    [entry] = AuditEntry.objects.filter(action="approve")
    assert (entry.actor, entry.note) == ("user:support", "photos checked on my phone")
