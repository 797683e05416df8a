"""Subject discovery and the timeline in a real browser (Debian's chromium through Playwright):
compliance finds a subject by something stored about them and opens its overview; the timeline's
lane labels, as chromium lays them out, end before the plot begins."""

from __future__ import annotations

import pytest

from console.timeline import LEFT
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from tests.console.conftest import dialogs_dismissed, screenshot
from tests.console.test_subjects_search import _seed

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_compliance_finds_a_subject_by_a_stored_value_and_opens_it(page_as, tenant, other_tenant):
    run = _seed(tenant, other_tenant)
    page = page_as("compliance")
    dialogs = dialogs_dismissed(page)
    page.wait_for_url("**/compliance/")
    page.fill("input[name=q]", "trondheim")
    page.click("#subject-search button")
    rows = page.locator("#subject-matches tbody tr")
    assert rows.count() == 1  # Globex's "Trondheim-Globex" is another tenant's: never shown
    assert "cust-501" in rows.first.inner_text() and "memory value" in rows.first.inner_text()
    screenshot(page, "compliance-subject-search")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    screenshot(page, "compliance-subject-search-phone")
    page.set_viewport_size({"width": 1360, "height": 900})
    rows.first.get_by_role("link", name="cust-501").click()
    page.click("details#technical summary")  # the stores and places are folded below the person
    page.wait_for_selector("#claims")
    link = page.locator(f"dl.provenance a:has-text('{run.run_id}')")
    assert link.count() == 1  # to the event the claim came from, as compliance reads it
    assert (link.get_attribute("href") or "").startswith(f"/compliance/acme/sources/{run.run_id}/?seq=")
    assert page.locator("dl.provenance span.muted:has-text('none')").count() >= 1
    assert dialogs == []


def test_the_timelines_lane_labels_end_before_the_plot(page_as, tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 0
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 2}, actor="test").run
    for _ in range(3):
        run_advance(run_id=run.run_id, worker_id="w")
    page = page_as("engineer")
    page.goto(f"/runs/{run.run_id}/")
    page.wait_for_selector("svg.timeline")
    # right edges of the lane labels and the plot's left edge, in the SVG's own units
    rights = page.evaluate(
        "[...document.querySelectorAll('svg.timeline text.lane-label')].map(t => t.getBBox().x + t.getBBox().width)"
    )
    lefts = page.evaluate(
        "[...document.querySelectorAll('svg.timeline text.lane-label')].map(t => t.getBBox().x)"
    )
    assert len(rights) == 10 and max(rights) < LEFT and min(lefts) >= 0
    assert page.locator("svg.timeline rect.step").count() == 3  # two failed attempts and the one that passed
    assert page.locator("svg.timeline rect.retry-wait").count() == 2
    page.locator("#timeline").screenshot(
        path=str(screenshot(page, "engineer-run-steps")).replace(".png", "-timeline.png")
    )
