"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against KeeperSaver on the real
embedded PostgreSQL, as the application role under row-level security."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from core.tenancy import tenant_ensure
from runs.langgraph.saver import KeeperSaver
from tests.runs.langgraph.conftest import run_coroutine

pytestmark = pytest.mark.django_db(transaction=True)


def test_keeper_saver_passes_langgraph_conformance(capsys) -> None:
    tenant = tenant_ensure(slug="acme", name="Acme")

    @checkpointer_test(name="KeeperSaver")
    async def keeper_saver():
        yield KeeperSaver(tenant_id=tenant.tenant_id)

    async def run():
        try:
            return await validate(keeper_saver, progress=ProgressCallbacks.verbose())
        finally:
            await sync_to_async(lambda: connection.close())()  # the connection of the saver's thread

    report = run_coroutine(run())
    report.print_report()
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    # Every optional capability Keeper honours passes too (delete_for_runs, copy_thread, prune).
    assert report.passed_all(), failures
    assert all(r.detected for r in report.results.values()), report.to_dict()
