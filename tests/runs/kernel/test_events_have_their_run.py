"""agent_events has no foreign key to agent_runs (its check cost every commit a query), so the kernel
keeps the promise itself: what deletes runs locks them first, and an event written to one of them
meanwhile goes with it instead of staying behind, history without a run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from core.models import Tenant
from core.tenancy import tenant_bind
from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.saver import KeeperSaver
from runs.operator.retention import runs_purge
from tests.runs.langgraph.graphs import support_graph

# The writer and the deleter need connections of their own.
pytestmark = pytest.mark.django_db(transaction=True)


def _waiting_for_a_lock() -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0


def _race(tenant: Tenant, write: Callable[[], object], delete: Callable[[], object]) -> None:
    """`write` an event in a transaction held open until `delete`, started meanwhile, waits for a lock;
    then let the write commit and the delete finish."""
    written, release, errors = threading.Event(), threading.Event(), []

    def writer() -> None:
        try:
            with tenant_bind(tenant.tenant_id), transaction.atomic():
                assert write() is not None
                written.set()
                assert release.wait(20)
        except BaseException as exc:  # noqa: BLE001 (reported below, on the test's thread)
            errors.append(exc)
            written.set()
        finally:
            connection.close()

    def deleter() -> None:
        try:
            delete()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=writer)
    first.start()
    assert written.wait(20)
    second = threading.Thread(target=deleter)
    second.start()
    deadline = time.monotonic() + 20
    while not _waiting_for_a_lock() and time.monotonic() < deadline and second.is_alive():
        time.sleep(0.02)
    assert second.is_alive(), "the delete did not wait for the writer's lock"
    release.set()
    first.join(20)
    second.join(20)
    assert not errors, errors


def test_the_run_table_has_no_foreign_key_from_its_events() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid = 'agent_events'::regclass"
        )
        assert cursor.fetchone()[0] == 0


def test_a_usage_charge_written_while_a_purge_waits_goes_with_the_run(tenant) -> None:
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
    AgentRun.objects.filter(run_id=run.run_id).update(
        status="completed", next_step=None, updated_at=timezone.now() - timedelta(days=100)
    )

    def charge() -> object:
        return apply(
            m.UsageCharged(run_id=run.run_id, tenant_id=tenant.tenant_id, payload={"tokens": 7}, actor="test")
        )

    def purge() -> object:
        return runs_purge(older_than_days=30, statuses=["completed"], tenant_id=tenant.tenant_id)

    _race(tenant, charge, purge)
    assert not AgentRun.objects.filter(run_id=run.run_id).exists()
    assert list(AgentEvent.objects.filter(run_id=run.run_id).values_list("event_type", flat=True)) == []


def test_a_message_written_while_its_thread_is_deleted_goes_with_the_thread(tenant) -> None:
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        config = {"configurable": {"thread_id": "raced", "subject_id": "cust-1"}}
        support_graph(saver).invoke({"note": "a note", "log": []}, config)
        run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:raced")

        def message() -> object:
            return apply(
                m.MessageAppended(
                    run_id=run.run_id,
                    tenant_id=tenant.tenant_id,
                    event_type="user_message",
                    payload={"content": "still there?"},
                    actor="user:x",
                    client_message_id="raced-1",
                )
            )

        _race(tenant, message, lambda: saver.delete_thread("raced"))
    finally:
        saver.close()
    assert not AgentRun.objects.filter(run_id=run.run_id).exists()
    assert list(AgentEvent.objects.filter(run_id=run.run_id).values_list("event_type", flat=True)) == []
