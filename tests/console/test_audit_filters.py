"""The audit log filters by actor, action, tenant, target and dates (typed as YYYY-MM-DD; a bad
value is a form error, 422), links targets to their pages, and exports the same entries as CSV
(audited, and safe to open in a spreadsheet)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from django.db import connection

from console.models import AuditEntry
from tests.console.conftest import screenshot
from tests.console.test_engineer import start

pytestmark = pytest.mark.django_db


def entry(*, at: datetime, actor: str, action: str, tenant=None, target_type="", target_id="", note=""):
    """An entry at a given time (the column is set on insert; the table refuses updates)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO console_audit_log (at, actor, tenant_id, action, target_type, target_id, note,"
            " details, remote_addr) VALUES (%s, %s, %s, %s, %s, %s, %s, '{}', '')",
            [at, actor, tenant.tenant_id if tenant else None, action, target_type, target_id, note],
        )


def day(d: int, hour: int = 12) -> datetime:
    return datetime(2026, 3, d, hour, tzinfo=UTC)


@pytest.fixture
def log(tenant, other_tenant):
    entry(at=day(1), actor="user:alice", action="approve", tenant=tenant, target_id="a-1")
    entry(at=day(2, 23), actor="user:bob", action="cancel", tenant=tenant, target_id="b-1")
    entry(at=day(3), actor="user:alice", action="cancel", tenant=tenant, target_id="a-2")
    entry(at=day(2), actor="user:alice", action="cancel", tenant=other_tenant, target_id="hidden")


def targets(response) -> list[str]:
    return [e.target_id for e, _ in response.context["rows"]]


def test_the_filters_narrow_by_actor_action_tenant_and_dates(as_role, log):
    client = as_role("support")
    assert targets(client.get("/audit/", {"actor": "alice"})) == ["a-2", "a-1"]  # never another tenant's
    assert targets(client.get("/audit/", {"actor": "user:bob"})) == ["b-1"]
    assert targets(client.get("/audit/", {"action": "cancel"})) == ["a-2", "b-1"]
    assert targets(client.get("/audit/", {"tenant": "acme", "action": "approve"})) == ["a-1"]
    # dates are whole UTC days, "to" inclusive: 2026-03-02 23:00 is in 03-02
    assert targets(client.get("/audit/", {"since": "2026-03-02", "until": "2026-03-02"})) == ["b-1"]
    assert targets(client.get("/audit/", {"since": "2026-03-02"})) == ["a-2", "b-1"]
    # The calendar's ends (the day after 9999-12-31 does not exist: not a 500).
    every = targets(client.get("/audit/", {"since": "0001-01-01", "until": "9999-12-31"}))
    assert every == targets(client.get("/audit/")) and every
    assert client.get("/audit/export.csv", {"since": "0001-01-01", "until": "9999-12-31"}).status_code == 200
    page = client.get("/audit/", {"actor": "alice"}).content.decode()
    assert 'href="/audit/export.csv?actor=alice"' in page and 'type="date"' in page
    # The label says what the date picker shows (a day), not a typed format the widget does not use.
    assert "From (a day, UTC)" in page and "YYYY-MM-DD, UTC" not in page


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "03/01/2026"}, "Enter a date as YYYY-MM-DD"),
        ({"until": "2026-02-30"}, "Enter a date as YYYY-MM-DD"),
        ({"since": "2026-03-03", "until": "2026-03-01"}, "&#x27;From&#x27; is after &#x27;To&#x27;"),
        ({"tenant": "globex"}, "Select a valid choice"),
        ({"actor": "x" * 201}, "at most 200 characters"),
    ],
)
def test_bad_filters_are_form_errors_with_422(as_role, log, params, message):
    for url in ("/audit/", "/audit/export.csv"):
        response = as_role("support").get(url, params)
        assert response.status_code == 422 and message in response.content.decode(), url
    assert not AuditEntry.objects.filter(action="audit_export").exists()


def test_targets_link_to_their_pages_for_the_roles_that_open_them(as_role, tenant):
    run = start(tenant)
    AuditEntry.objects.create(
        tenant=tenant, actor="user:x", action="cancel", target_type="run", target_id=run.run_id
    )
    AuditEntry.objects.create(
        tenant=tenant, actor="user:x", action="lookup", target_type="user", target_id="x"
    )
    engineer = as_role("engineer").get("/audit/").content.decode()
    assert f'href="/runs/{run.run_id}/"><code>{run.run_id}</code></a>' in engineer
    support = as_role("support").get("/audit/").content.decode()
    assert f'href="/support/runs/{run.run_id}/"><code>{run.run_id}</code></a>' in support


def test_the_csv_export_has_the_filtered_entries_is_audited_and_formula_safe(as_role, tenant, log):
    for note in ('=HYPERLINK("http://evil")', "+1", "-2", "@SUM(A1)", "plain"):
        entry(at=day(4), actor="user:carol", action="reconcile", tenant=tenant, target_id="c", note=note)
    client = as_role("support")
    response = client.get("/audit/export.csv", {"actor": "carol"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:5] == ["id", "at_utc", "actor", "tenant", "action"]
    notes = [row[7] for row in rows[1:]]
    assert notes == ["plain", "'@SUM(A1)", "'-2", "'+1", '\'=HYPERLINK("http://evil")']
    assert {row[2] for row in rows[1:]} == {"user:carol"} and rows[1][1] == "2026-03-04T12:00:00+00:00"
    everything = list(csv.reader(io.StringIO(client.get("/audit/export.csv").content.decode())))
    assert "hidden" not in {row[6] for row in everything}  # another tenant's entry is never exported
    exported = AuditEntry.objects.filter(action="audit_export", actor="user:support").order_by("id")
    assert exported.count() == 2 and exported[0].details["filters"] == {"actor": "carol"}
    assert exported[0].details["entries"] == 5


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_audit_filters_in_the_browser(page_as, tenant, other_tenant):
    entry(at=day(1), actor="user:alice", action="approve", tenant=tenant, target_id="a-1")
    entry(at=day(3), actor="user:alice", action="cancel", tenant=tenant, target_id="a-2")
    entry(at=day(3), actor="user:bob", action="cancel", tenant=tenant, target_id="b-1")
    page = page_as("support")
    page.goto("/audit/")
    page.fill("input[name=actor]", "alice")
    page.fill("input[name=since]", "2026-03-02")  # the browser's date input
    page.click("#audit-filters button[type=submit]")
    page.wait_for_url("**/audit/?*actor=alice*")
    table = page.locator("table.audit").inner_text()
    assert "a-2" in table and "a-1" not in table and "b-1" not in table
    assert "since=2026-03-02" in page.url  # the filter is in the URL (bookmark it)
    with page.expect_download() as download:
        page.click("#audit-export")
    path = download.value.path()
    assert path is not None and "a-2" in path.read_text(encoding="utf-8")
    screenshot(page, "audit-log-filtered")
