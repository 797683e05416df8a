"""The engineer's run list and run page are live: they poll with the key of what they show, get 204
while nothing changed (nothing is redrawn), and take the new rows and parts when a run changes."""

from __future__ import annotations

import re

import pytest

from console.live import run_actions_key, run_live_key
from runs.kernel.models import AgentRun
from tests.console.conftest import screenshot
from tests.console.test_engineer import detail, finish, start

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def _poll_url(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*?hx-get="([^"]+)"', page, re.DOTALL)
    assert found, f"no poll on #{element_id}"
    return found.group(1).replace("&amp;", "&")


def test_the_run_list_poll_answers_204_until_a_run_changes(as_role, tenant):
    run = start(tenant, n=2)
    client = as_role("engineer")
    page = client.get("/runs/", {"workflow": "demo.countdown"}).content.decode()
    poll = _poll_url(page, "run-table")
    assert "workflow=demo.countdown" in poll and "live=" in poll  # the filter stays in the poll
    unchanged = client.get(poll, **HTMX, HTTP_HX_TARGET="run-table")
    assert unchanged.status_code == 204 and unchanged.content == b""
    finish(run)
    changed = client.get(poll, **HTMX, HTTP_HX_TARGET="run-table")
    fragment = changed.content.decode()
    assert changed.status_code == 200 and "<html" not in fragment
    assert 'class="pill completed"' in fragment and _poll_url(fragment, "run-table") != poll


def test_the_run_page_poll_answers_204_until_the_run_changes(as_role, tenant):
    run = start(tenant, n=2)
    client = as_role("engineer")
    page = client.get(detail(run)).content.decode()
    poll = _poll_url(page, "run-live")
    assert f"key={run_live_key(run)}" in poll.replace("%2E", ".")
    assert client.get(poll, **HTMX).status_code == 204
    finish(run)
    changed = client.get(poll, **HTMX)
    assert changed.status_code == 200 and changed["HX-Trigger"] == "keeper-run-actions-changed"
    body = changed.content.decode()
    assert (
        'hx-swap-oob="outerHTML:main &gt; h1 &gt; .pill"' in body
        or 'hx-swap-oob="outerHTML:main > h1 > .pill"' in body
    )
    run.refresh_from_db()
    assert run.status == "completed" and run_actions_key(run).startswith("completed")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_moves_to_completed_on_the_open_pages_without_a_reload(page_as, tenant):
    run = start(tenant, n=3)
    lister, runner = page_as("engineer"), page_as("engineer")
    lister.goto("/runs/")
    runner.goto(detail(run))
    for page in (lister, runner):
        page.evaluate("window.keeperNotReloaded = true")
    assert "running" in lister.locator(f'tr[data-run="{run.run_id}"] .pill').inner_text()
    assert runner.locator("#actions form[action$='/cancel/']").count() == 1
    finish(run)
    assert AgentRun.objects.get(run_id=run.run_id).status == "completed"
    lister.wait_for_selector(f'tr[data-run="{run.run_id}"] .pill.completed', timeout=30_000)
    runner.wait_for_selector("main > h1 > .pill.completed", timeout=30_000)
    runner.wait_for_selector("#live-status.completed", timeout=30_000)
    # the actions follow the status: a completed run offers no cancel
    runner.locator("#actions form[action$='/cancel/']").wait_for(state="detached", timeout=30_000)
    for page in (lister, runner):
        assert page.evaluate("window.keeperNotReloaded") is True  # the same document: no reload
    assert f"revision {AgentRun.objects.get(run_id=run.run_id).state_revision}" in runner.locator(
        "#run-live"
    ).inner_text().replace("\n", " ")
    screenshot(lister, "engineer-run-list-live")
    screenshot(runner, "engineer-run-page-live")


def test_the_run_list_key_changes_with_a_step_committed_within_the_same_second() -> None:
    """A run stepping on in one status moves updated_at at most once a second; the list's live key
    must still change when its revision (or holder) does, or the rev. and lease columns go stale."""
    from datetime import UTC, datetime
    from types import SimpleNamespace
    from uuid import uuid4

    from console.live import rows_live_key

    at = datetime(2026, 12, 1, tzinfo=UTC)
    run = SimpleNamespace(run_id=uuid4(), status="running", state_revision=5, lease_owner="w1", updated_at=at)
    before = rows_live_key([run])
    assert rows_live_key([SimpleNamespace(**{**vars(run), "state_revision": 6})]) != before
    assert rows_live_key([SimpleNamespace(**{**vars(run), "lease_owner": None})]) != before
    assert rows_live_key([run]) == before
