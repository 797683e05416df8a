"""The audit log's keyset pages in a real browser: "older »" and "« newest" walk the entries."""

from __future__ import annotations

import pytest

from console.models import AuditEntry
from tests.console.conftest import screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_older_and_newest_links_page_through_the_audit_log(page_as, tenant):
    for i in range(60):
        AuditEntry.objects.create(tenant=tenant, actor="user:x", action="lookup", target_id=f"entry-{i:03d}")
    page = page_as("support")
    page.goto("/audit/")
    first = page.locator("table").inner_text()
    assert "entry-059" in first and "entry-005" not in first
    page.click("text=older »")
    page.wait_for_url("**/audit/?cursor=*")
    older = page.locator("table").inner_text()
    assert "entry-000" in older and "entry-059" not in older
    screenshot(page, "audit-log-older")
    page.click("text=« newest")
    page.wait_for_url("**/audit/")
    assert "entry-059" in page.locator("table").inner_text()
