"""The engineer screens in a real browser (Debian's chromium): the run list, a run's timeline, a diff
of two revisions picked on the page, queue health and a bulk dry run; each saved as a screenshot.
Hostile content renders as text, runs no script, and does not break the layout."""

from __future__ import annotations

import pytest

from tests.console.conftest import dialogs_dismissed, screenshot
from tests.console.test_engineer import HOSTILE, add_event, deep, finish, start, suspended

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_engineer_opens_a_timeline_and_a_revision_diff(page_as, tenant):
    run = finish(start(tenant, n=4))
    for _ in range(3):
        suspended(tenant)
    page = page_as("engineer")
    page.goto("/runs/")
    assert page.locator("h1").inner_text() == "Runs"
    assert page.locator("tr[data-run]").count() == 4
    screenshot(page, "engineer-run-list")

    page.click(f'tr[data-run="{run.run_id}"] a')
    page.wait_for_url(f"**/runs/{run.run_id}/")
    timeline = page.locator("svg.timeline")
    assert timeline.is_visible() and timeline.bounding_box()["width"] > 600
    assert page.locator("svg.timeline rect.activity").count() >= 1
    assert page.locator("svg.timeline .mark-end").count() == 1
    assert "completed" in page.locator("svg.timeline .mark-end title").text_content()
    assert page.locator("#events tr[id^=seq-]").count() == run.state_revision
    screenshot(page, "engineer-run-page")

    page.fill("#diff-form input[name=a]", "2")
    page.fill("#diff-form input[name=b]", "4")
    page.click("#diff-form button[type=submit]")
    page.wait_for_selector("#revision-panel .diff-title")
    assert page.url.endswith(f"/runs/{run.run_id}/")  # swapped into the page by htmx
    panel = page.locator("#revision-panel")
    assert "revision 2 → 4" in panel.locator(".diff-title").inner_text()
    assert "$.remaining" in panel.inner_text()
    assert panel.locator("td.diff-add").count() >= 1 and panel.locator("td.diff-del").count() >= 1
    panel.scroll_into_view_if_needed()
    screenshot(page, "engineer-diff")

    page.goto("/queue/")
    page.wait_for_selector("#queue-panel #by-status svg")
    assert page.locator("#by-status .bar-suspended title").text_content() == "suspended: 3"
    screenshot(page, "engineer-queue")

    page.goto("/runs/?status=suspended")
    page.select_option("select[name=action]", "resume")
    page.click("text=Dry run…")
    page.wait_for_selector("#dry-run")
    assert "3 runs match this filter; 3 would change" in page.locator(".dry-run-count").inner_text()
    assert page.locator("#bulk-confirm input[name=confirm]").is_visible()
    screenshot(page, "engineer-bulk-dry-run")


def test_hostile_content_stays_text_and_the_page_stays_usable(page_as, tenant) -> None:
    run = start(tenant)
    add_event(
        run,
        "user_message",
        {"text": f"{HOSTILE} שלום 🙂", "long": "y" * 5000, "deep": deep(200)},
        actor=HOSTILE,
    )
    rev = add_event(run, "step_completed", {}, state={"note": HOSTILE, "long": "x" * 5000, "deep": deep(200)})
    page = page_as("engineer")
    dialogs = dialogs_dismissed(page)
    page.goto(f"/runs/{run.run_id}/")
    assert HOSTILE in page.locator("#events").inner_text()  # shown as text
    assert page.evaluate("document.documentElement.scrollWidth") <= 1360 + 40  # long text wraps
    page.fill("#diff-form input[name=a]", "1")
    page.fill("#diff-form input[name=b]", str(rev))
    page.click("#diff-form button[type=submit]")
    page.wait_for_selector("#revision-panel .diff-title")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1360 + 40
    page.goto(f"/runs/{run.run_id}/state/?rev={rev}")
    assert "x" * 5000 in page.locator("pre.state").inner_text()
    screenshot(page, "engineer-hostile-state")
    assert dialogs == []  # no script ran
