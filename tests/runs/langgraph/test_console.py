"""A LangGraph thread shows in the console like any run: the run list, its page with the checkpoint
events, and the support inbox, which it does not enter (nobody has to act on it)."""

from __future__ import annotations

import pytest

from runs.engine.models import AgentRun
from runs.langgraph.saver import KeeperSaver
from tests.console.conftest import as_role, role_users  # noqa: F401 - the fixtures
from tests.runs.langgraph.graphs import support_graph

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_engineer_reads_the_threads_checkpoints_on_its_run_page(as_role, tenant) -> None:  # noqa: F811
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        support_graph(saver).invoke(
            {"note": "parcel arrived broken", "log": []}, {"configurable": {"thread_id": "t-9"}}
        )
    finally:
        saver.close()
    run = AgentRun.objects.get(idempotency_key="langgraph:t-9")
    engineer = as_role("engineer")
    listing = engineer.get("/runs/")
    assert listing.status_code == 200 and str(run.run_id) in listing.content.decode()
    page = engineer.get(f"/runs/{run.run_id}/")
    assert page.status_code == 200
    assert page.content.decode().count("langgraph_checkpoint") >= 5
    inbox = as_role("support").get("/support/")
    assert inbox.status_code == 200 and str(run.run_id) not in inbox.content.decode()
