"""The run list and the audit log sorted server-side by a column header: a link per sortable column,
aria-sort and an arrow on the current one, the order kept with the filters across pages (and in the
audit log's CSV export), and a page cursor that is not this order's a form error (422), never a 500."""

from __future__ import annotations

import csv
import io
import re

import pytest

from console.models import AuditEntry
from runs.engine.runs import run_start
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db


def _headers(html: str) -> dict[str, str]:
    """Each header cell of the first table: its text -> its opening tag."""
    head = html[html.index("<thead>") : html.index("</thead>")]
    return {
        re.sub(r"<[^>]+>|[↑↓]", "", cell).strip(): tag
        for tag, cell in re.findall(r"(<th(?:\s[^>]*)?>)(.*?)</th>", head, flags=re.S)
    }


def _link(html: str, label: str) -> str:
    found = re.search(rf'<th(?:\s[^>]*)?><a href="([^"]+)" title="[^"]*">{label}</a>', html)
    assert found, label
    return found.group(1).replace("&amp;", "&")


def _walk(client, url: str) -> tuple[list, list[str]]:
    """Every page from `url` by its "older »" links: the rows and the links followed."""
    rows, links = [], []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content[:500]
        rows += list(response.context["rows"])
        found = re.search(r'class="older" href="([^"]+)"', response.content.decode())
        url = found.group(1).replace("&amp;", "&") if found else ""
        if url:
            url = url if url.startswith("/") else "/audit/" + url
            links.append(url)
    return rows, links


def test_the_run_list_sorts_by_each_column_header_both_ways_across_pages(as_role, tenant):
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t").run
        for i in range(7)
    ]
    for run, name in zip(runs, ("beta", "alpha", "gamma", "alpha", "beta", "alpha", "delta"), strict=True):
        AgentRun.objects.filter(run_id=run.run_id).update(workflow_name=name)
    client = as_role("engineer")
    html = client.get("/runs/", {"status": "running"}).content.decode()
    headers = _headers(html)
    linked = {label for label in headers if re.search(rf'<a href="[^"]+" title="[^"]*">{label}</a>', html)}
    assert linked == {"tenant", "workflow", "status", "started", "subject", "updated"}
    assert set(headers) - linked == {"run", "duration", "next step", "rev.", "lease", "idempotency key"}
    assert headers["updated"] == '<th aria-sort="descending">'  # the default order
    assert [tag for tag in headers.values() if "aria-sort" in tag] == [headers["updated"]]
    by_workflow = _link(html, "workflow")
    assert "sort=workflow" in by_workflow and "status=running" in by_workflow  # the filter goes along

    expected = [r.run_id for r in sorted(AgentRun.objects.all(), key=lambda r: (r.workflow_name, r.run_id))]
    rows, links = _walk(client, by_workflow + "&limit=3")
    assert [run.run_id for run, _, _ in rows] == expected and len(links) == 2
    assert all("sort=workflow" in link and "status=running" in link and "limit=3" in link for link in links)
    page = client.get(by_workflow).content.decode()
    assert _headers(page)["workflow"] == '<th aria-sort="ascending">' and "↑" in page
    assert 'name="sort" value="workflow"' in page  # the filter form keeps the order
    reverse = _link(page, "workflow")  # a second click: the other way
    assert "sort=workflow_desc" in reverse
    rows, _ = _walk(client, reverse + "&limit=2")
    assert [run.run_id for run, _, _ in rows] == expected[::-1]
    assert _headers(client.get(reverse).content.decode())["workflow"] == '<th aria-sort="descending">'


def test_a_run_list_cursor_edited_or_of_another_order_is_a_form_error(as_role, tenant):
    for i in range(3):
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="t")
    client = as_role("engineer")
    html = client.get("/runs/", {"sort": "subject", "limit": 1}).content.decode()
    cursor = re.search(r"cursor=([^&\"]+)", html).group(1)
    assert client.get("/runs/", {"sort": "subject", "limit": 1, "cursor": cursor}).status_code == 200
    for params in (
        {"sort": "status", "cursor": cursor},  # another order's
        {"cursor": cursor},  # the default order's
        {"sort": "subject", "cursor": cursor[:-4]},
        {"sort": "subject", "cursor": "'; drop table agent_runs; --"},
        {"sort": "colour"},
    ):
        response = client.get("/runs/", params)
        assert response.status_code == 422 and b"The filter is not valid" in response.content, params


def test_the_audit_log_sorts_by_actor_tenant_and_action_across_pages_and_exports_in_that_order(
    as_role, tenant
):
    for i, (actor, action) in enumerate(
        [("user:zed", "lookup"), ("user:support", "resume"), ("user:kim", "lookup"), ("user:amy", "cancel")]
        * 30
    ):
        AuditEntry.objects.create(
            tenant=tenant if i % 3 else None, actor=actor, action=action, target_id=f"t{i}"
        )
    client = as_role("support")
    html = client.get("/audit/", {"since": "2000-01-01"}).content.decode()
    headers = _headers(html)
    assert headers["when"] == '<th aria-sort="descending">' and headers["target"] == "<th>"
    by_actor = _link(html, "actor")
    assert "sort=actor" in by_actor and "since=2000-01-01" in by_actor
    visible = list(AuditEntry.objects.filter(tenant=tenant) | AuditEntry.objects.filter(actor="user:support"))
    expected = [e.id for e in sorted(visible, key=lambda e: (e.actor, e.id))]
    rows, links = _walk(client, by_actor)
    assert [e.id for e, _ in rows] == expected and len(links) >= 1
    assert all("sort=actor" in link and "since=2000-01-01" in link for link in links)
    page = client.get(by_actor).content.decode()
    assert _headers(page)["actor"] == '<th aria-sort="ascending">'
    export = client.get(re.search(r'id="audit-export" href="([^"]+)"', page).group(1).replace("&amp;", "&"))
    ids = [int(row[0]) for row in list(csv.reader(io.StringIO(export.content.decode())))[1:]]
    assert ids == expected  # the export keeps the page's order
    # by tenant, going down: the entries with no tenant come first (NULLs first going down)
    rows, _ = _walk(client, "/audit/?sort=tenant_desc")
    tenants = [e.tenant_id for e, _ in rows]
    assert tenants == sorted(tenants, key=lambda t: t is not None)
    assert [e.id for e, _ in rows if e.tenant_id] == sorted(
        (e.id for e in visible if e.tenant_id), reverse=True
    )
    by_action, _ = _walk(client, "/audit/?sort=action_desc")
    visible += AuditEntry.objects.filter(action="audit_export")  # the export is itself audited
    assert [e.action for e, _ in by_action] == sorted((e.action for e in visible), reverse=True)


def test_an_audit_cursor_edited_or_of_another_order_is_a_form_error(as_role, tenant):
    for i in range(60):
        AuditEntry.objects.create(tenant=tenant, actor="user:x", action="lookup", target_id=f"t{i}")
    client = as_role("support")
    html = client.get("/audit/", {"sort": "actor"}).content.decode()
    cursor = re.search(r"cursor=([^&\"]+)", html).group(1)
    for params in (
        {"sort": "action", "cursor": cursor},
        {"cursor": "x1"},
        {"sort": "when_asc", "cursor": "9" * 40},
    ):
        response = client.get("/audit/", params)
        assert response.status_code == 422 and b"The filter is not valid" in response.content, params
        assert client.get("/audit/export.csv", params).status_code == 422
