"""core.pagination: keyset pages walk every row once in key order, ties included, with one row
comparison on the key tuple (never OFFSET)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.models import AuditEntry
from core.pagination import keyset_page
from runs.engine.runs import run_start
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db

KEYS = ("updated_at", "run_id")


def test_pages_walk_runs_with_equal_timestamps_once_in_key_order(tenant):
    ids = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run.run_id
        for i in range(7)
    ]
    same, now = timezone.now(), timezone.now()
    AgentRun.objects.filter(run_id__in=ids[:4]).update(updated_at=same)  # four rows tie on updated_at
    for i, run_id in enumerate(ids[4:]):
        AgentRun.objects.filter(run_id=run_id).update(updated_at=now - timedelta(minutes=i + 1))
    expected = list(AgentRun.objects.order_by("-updated_at", "-run_id").values_list("run_id", flat=True))
    seen, cursor, pages = [], None, 0
    while True:
        page = keyset_page(AgentRun.objects.all(), keys=KEYS, cursor=cursor, limit=3)
        seen += [run.run_id for run in page.rows]
        pages += 1
        if not page.more:
            break
        cursor = page.next_cursor
        assert cursor == (page.rows[-1].updated_at, page.rows[-1].run_id)
    assert seen == expected and len(seen) == 7 and pages == 3


def test_a_page_is_one_row_comparison_and_limit_plus_one(tenant):
    for i in range(3):
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t")
    first = keyset_page(AgentRun.objects.all(), keys=KEYS, cursor=None, limit=2)
    with CaptureQueriesContext(connection) as queries:
        second = keyset_page(AgentRun.objects.all(), keys=KEYS, cursor=first.next_cursor, limit=2)
    [query] = queries.captured_queries
    sql = query["sql"]
    assert 'WHERE ROW("agent_runs"."updated_at", "agent_runs"."run_id") < (ROW(' in sql, sql
    assert "OFFSET" not in sql and "LIMIT 3" in sql
    assert len(second.rows) == 1 and not second.more


def test_ascending_pages_on_one_key_and_a_bad_cursor():
    for i in range(5):
        AuditEntry.objects.create(actor="user:a", action="sign_in", note=str(i))
    ids = sorted(AuditEntry.objects.values_list("id", flat=True))
    page = keyset_page(AuditEntry.objects.all(), keys=("id",), cursor=(ids[1],), limit=2, descending=False)
    assert [e.id for e in page.rows] == ids[2:4] and page.next_cursor == (ids[3],)
    last = keyset_page(AuditEntry.objects.all(), keys=("id",), cursor=(ids[3],), limit=2, descending=False)
    assert [e.id for e in last.rows] == ids[4:] and last.next_cursor is None
    with pytest.raises(ValueError, match="a cursor of 1 values"):
        keyset_page(AuditEntry.objects.all(), keys=("id",), cursor=(1, 2), limit=2)
