"""The audit log page: keyset pages newest first (`cursor`: where a page starts), each entry shown once."""

from __future__ import annotations

import re

import pytest

from console.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_older_links_walk_every_entry_once_newest_first(as_role, tenant):
    for i in range(120):
        AuditEntry.objects.create(tenant=tenant, actor="user:x", action="lookup", target_id=f"t-{i:03d}")
    client = as_role("support")
    expected = [f"t-{i:03d}" for i in range(119, -1, -1)]
    seen, url, pages = [], "/audit/", 0
    while url:
        html = client.get(url).content.decode()
        pages += 1
        seen += re.findall(r"<code>(t-\d{3})</code>", html)
        older = re.search(r'class="older" href="\?(cursor=[^"]+)"', html)
        url = f"/audit/?{older.group(1)}" if older else ""
        assert pages == 1 or "« newest" in html
    assert seen == expected and pages == 3


def test_a_bad_cursor_is_a_form_error_and_the_target_filter_holds(as_role, tenant):
    for target in ("a", "b", "a"):
        AuditEntry.objects.create(tenant=tenant, actor="user:x", action="lookup", target_id=target)
    client = as_role("support")
    page = client.get("/audit/", {"target": "a"})
    assert page.status_code == 200
    assert (
        page.content.decode().count("<code>a</code>") == 2 and "<code>b</code>" not in page.content.decode()
    )
    for cursor in ("x1", "9" * 40):
        response = client.get("/audit/", {"cursor": cursor, "target": "a"})
        assert response.status_code == 422 and "not one this list made" in response.content.decode()
