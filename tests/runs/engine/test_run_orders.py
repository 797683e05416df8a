"""runs.engine.selectors: every order of the run lists, both ways, walks every run once in order, ties
on the column broken by the start (by status) and run_id, for one tenant and merged over several;
the page cursor goes through its token and back between pages."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from core.pagination import CursorInvalid
from core.tenancy import tenant_bind, tenant_bind_request
from runs.engine.runs import run_start
from runs.engine.selectors import (
    RUN_ORDERS,
    run_cursor_decode,
    run_cursor_encode,
    run_filtered_page,
    run_page,
)
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db

# (workflow, status, next step, subject, minutes ago started, minutes ago updated): repeated values
# on every column, two runs that tie on both times, and two running runs started in the same second.
SHAPES = [
    ("beta", "running", "tick", "ann", 9, 1),
    ("alpha", "completed", None, "", 8, 2),
    ("beta", "suspended", "tick", "bob", 7, 2),
    ("alpha", "running", "finish", "ann", 7, 3),
    ("gamma", "completed", None, "bob", 6, 4),
    ("alpha", "suspended", None, "", 5, 5),
    ("beta", "running", "finish", "ann", 4, 4),
    ("gamma", "running", "tick", "", 4, 6),
]


def _runs(tenant, shapes):
    now = timezone.now().replace(microsecond=0)  # whole seconds: ties on the times
    for workflow, status, next_step, subject, started, updated in shapes:
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
        AgentRun.objects.filter(run_id=run.run_id).update(
            workflow_name=workflow,
            status=status,
            next_step=next_step,
            suspend_reason="needs_look" if status == "suspended" else None,
            subject=subject,
            created_at=now - timedelta(minutes=started),
            updated_at=now - timedelta(minutes=updated),
        )


def _expected(name: str) -> list:
    """The runs in `name`'s order, sorted here: NULLs as the greatest value, ties by the order's
    further keys (by status: the start), then by run_id."""
    order = RUN_ORDERS[name]
    keys = ["tenant__slug" if key == "tenant_slug" else key for key in order.keys]
    rows = list(AgentRun.objects.values_list(*keys))
    rows.sort(key=lambda row: (row[0] is None, row[0] or "", *row[1:]), reverse=order.descending)
    return [row[-1] for row in rows]


def _walk(page_of, name: str) -> list:
    seen, cursor = [], None
    for _ in range(50):
        page = page_of(cursor)
        seen += [run.run_id for run in page.rows]
        if not page.more:
            return seen
        # as a page link carries it: through the token and back
        cursor = run_cursor_decode(order=name, token=run_cursor_encode(order=name, cursor=page.next_cursor))
    raise AssertionError("the pages did not end")


@pytest.mark.parametrize("name", list(RUN_ORDERS))
def test_every_order_walks_one_tenants_runs_once_in_order(tenant, name):
    _runs(tenant, SHAPES)
    expected = _expected(name)
    for limit in (1, 2, 3):
        seen = _walk(
            lambda cursor, limit=limit: run_filtered_page(
                tenant_ids=[tenant.tenant_id], filters={}, cursor=cursor, limit=limit, order=name
            ),
            name,
        )
        assert seen == expected, (name, limit)
    # The API's list pages the same way, and keeps its filters with the order.
    api = _walk(lambda cursor: run_page(tenant=tenant, cursor=cursor, limit=2, order=name), name)
    assert api == expected
    suspended = _walk(
        lambda cursor: run_page(tenant=tenant, cursor=cursor, limit=1, order=name, status="suspended"),
        name,
    )
    held = set(AgentRun.objects.filter(status="suspended").values_list("run_id", flat=True))
    assert suspended == [run_id for run_id in expected if run_id in held] and len(held) == 2


@pytest.mark.parametrize("name", list(RUN_ORDERS))
def test_every_order_merges_the_pages_of_several_tenants_in_order(tenant, other_tenant, name):
    _runs(tenant, SHAPES)
    with_other = [(w, s, n, subj, a + 1, u) for w, s, n, subj, a, u in SHAPES[:4]]
    with tenant_bind(other_tenant.tenant_id):
        _runs(other_tenant, with_other)
    both = [tenant.tenant_id, other_tenant.tenant_id]
    tenant_bind_request(SimpleNamespace(), both)  # as the console binds a user of several tenants
    expected = _expected(name)
    assert len(expected) == len(SHAPES) + 4
    seen = _walk(
        lambda cursor: run_filtered_page(tenant_ids=both, filters={}, cursor=cursor, limit=3, order=name),
        name,
    )
    assert seen == expected


def test_a_cursor_of_another_order_or_edited_is_refused():
    token = run_cursor_encode(order="workflow", cursor=("alpha", AgentRun().run_id))
    assert run_cursor_decode(order="workflow", token=token)[0] == "alpha"
    for order, bad in (
        ("workflow_desc", token),  # another order's
        (
            "updated",
            run_cursor_encode(order="updated", cursor=("alpha", AgentRun().run_id)),
        ),  # text for a time
        (
            "workflow",
            run_cursor_encode(order="workflow", cursor=(None, AgentRun().run_id)),
        ),  # NULL, never NULL
        ("workflow", token[:-3]),  # cut
        ("workflow", "not a cursor"),
        ("workflow", ""),
    ):
        with pytest.raises(CursorInvalid):
            run_cursor_decode(order=order, token=bad)
