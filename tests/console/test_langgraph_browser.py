"""In a real browser (Debian's chromium through Playwright): support answers a LangGraph interrupt in
the console and a real Celery worker resumes the graph with the answer."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runs.kernel.models import AgentRun
from tests.console.conftest import screenshot
from tests.processes import wait_until

pytest.importorskip(
    "langgraph.types", reason="the langgraph extra is not installed: pip install -e '.[langgraph]'"
)
from runs.langgraph.example import support_graph, support_thread_start  # noqa: E402
from runs.langgraph.saver import KeeperSaver  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_answer_in_the_console_resumes_the_graph(page_as, tenant, processes) -> None:
    support_thread_start(tenant_id=tenant.tenant_id, thread_id="web-1", message="Order A-1001 arrived broken")
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:web-1")
    processes.worker()

    page = page_as("support")
    page.goto("/support/")
    row = page.locator(f'#questions tr[data-run="{run.run_id}"]')
    expect(row).to_contain_text("Refund order A-1001 of 42.00 EUR to Ada?")
    screenshot(page, "support-langgraph-inbox")
    row.get_by_role("link", name="Answer").click()
    page.wait_for_url(f"**/support/runs/{run.run_id}/")
    expect(page.locator("#langgraph-question")).to_contain_text("arrived broken")
    page.fill("#id_answer", '{"approved": true}')
    page.check("input[name=kind][value=json]")
    page.fill("#id_note", "photos checked")
    screenshot(page, "support-langgraph-answer")
    page.get_by_role("button", name="Answer").click()
    expect(page.locator("ul.messages")).to_contain_text("a worker resumes the graph")

    saver = KeeperSaver(tenant_id=tenant.tenant_id)

    def replied() -> bool:  # the run stops waiting at the resumed graph's first checkpoint; the reply follows
        return "reply" in support_graph(saver).get_state({"configurable": {"thread_id": "web-1"}}).values

    wait_until(replied, timeout=60, message=f"the worker to resume the graph\n{processes.logs()}")
    run.refresh_from_db()
    assert run.suspend_reason == "langgraph_thread"
    state = support_graph(saver).get_state({"configurable": {"thread_id": "web-1"}})
    assert state.values["reply"] == "Your refund for order A-1001 is approved."
    page.goto("/support/")
    expect(page.locator(f'tr[data-run="{run.run_id}"]')).to_have_count(0)
