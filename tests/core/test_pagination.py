"""core.pagination: keyset pages walk every row once in key order, ties included, with one row
comparison on the key tuple (never OFFSET), NULLs in one place; a cursor token comes back as it went."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from uuid import UUID, uuid4

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.models import AuditEntry
from core.pagination import CursorInvalid, cursor_decode, cursor_encode, keyset_page
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


def test_a_cursor_token_brings_back_text_null_times_integers_and_uuids_as_they_went():
    at = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=dt_timezone(timedelta(hours=5, minutes=30)))
    run_id = uuid4()
    for values in (
        ('Zoë "quoted" & <b>', run_id),
        ("", run_id),
        (None, run_id),
        (at, run_id),
        (2**62, 7),
    ):
        token = cursor_encode("o", values)
        assert token.isascii() and "=" not in token and "+" not in token and "/" not in token  # URL-safe
        kinds = ["int"] if isinstance(values[0], int) else ["time"] if values[0] == at else ["text"]
        last = "i" if isinstance(values[1], int) else "u"
        back = cursor_decode(token, order="o", kinds=kinds, nullable=True, last=last)
        assert back == values and all(type(a) is type(b) for a, b in zip(back, values, strict=True))
    assert cursor_decode(cursor_encode("o", (at, run_id)), order="o", kinds=["time"])[0].utcoffset() == (
        timedelta(hours=5, minutes=30)
    )


@pytest.mark.parametrize(
    "token",
    [
        "%%%",
        "bm90IGpzb24",  # "not json"
        cursor_encode("other", ("a", UUID(int=1))),
        cursor_encode("o", ("a",)),
        cursor_encode("o", (1, UUID(int=1))),  # an integer where text goes
        cursor_encode("o", ("a", 5)),  # an integer where the UUID goes
        cursor_encode("o", (None, UUID(int=1))),  # NULL in a column that has none
        cursor_encode("o", ("a\x00b", UUID(int=1))),  # PostgreSQL text holds no NUL
    ],
)
def test_a_cursor_not_made_for_the_order_is_refused_with_a_reason(token):
    with pytest.raises(CursorInvalid):
        cursor_decode(token, order="o", kinds=["text"])


def test_pages_on_a_nullable_column_put_nulls_last_going_up_and_first_going_down(tenant, other_tenant):
    # entries with no tenant (sign-ins) and ties on the tenant: the id breaks them
    for owner in (tenant, None, other_tenant, tenant, None, other_tenant, tenant):
        AuditEntry.objects.create(actor="user:a", action="lookup", tenant=owner)
    rows = list(AuditEntry.objects.values_list("tenant__slug", "id"))
    up = [i for _, i in sorted(rows, key=lambda row: (row[0] is None, row[0] or "", row[1]))]
    entries = AuditEntry.objects.annotate(slug=F("tenant__slug"))
    for descending, expected in ((False, up), (True, up[::-1])):
        for limit in (1, 2, 3):
            seen, cursor = [], None
            while True:
                page = keyset_page(
                    entries,
                    keys=("slug", "id"),
                    cursor=cursor,
                    limit=limit,
                    descending=descending,
                    nullable=True,
                )
                seen += [e.id for e in page.rows]
                if not page.more:
                    break
                cursor = page.next_cursor
            assert seen == expected, (descending, limit)
