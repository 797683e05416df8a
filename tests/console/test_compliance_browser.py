"""Compliance in a real browser: search a subject, see its claims (hostile ones escaped), erase it
with the confirmation step, watch a real Celery worker's progress, and read and download the receipt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from celery import current_app

from core.tenancy import tenant_scope
from erasure.models import ErasureRequest
from memory.models import MemoryItem
from memory.services import memory_remember
from tests.console.conftest import dialogs_dismissed, screenshot
from tests.console.test_compliance import HOSTILE, SUBJECT, seed_subject
from tests.memory.test_memory import said

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_compliance_erases_a_subject_and_reads_the_receipt(page_as, tenant, processes, tmp_path: Path):
    seeded = seed_subject(tenant)
    for key, value in HOSTILE.items():
        memory_remember(
            tenant=tenant,
            subject_id=SUBJECT,
            namespace="imported",
            key=key,
            value=value,
            provenance=said(source_id="<svg onload=alert(2)>"),
            reviewed=True,  # bidi and zero-width text would be held for review: approved, as a person would
        )
    current_app.control.purge()  # the seeding's wake-ups and projections are not part of this test

    page = page_as("compliance")
    dialogs = dialogs_dismissed(page)
    page.wait_for_url("**/compliance/")  # a compliance user lands on its screen
    page.fill("input[name=subject]", SUBJECT)
    page.click("button:has-text('Search')")
    page.click("details#technical summary")  # the stores and places are folded below the person
    page.wait_for_selector("#claims")
    second, first = (f"#m-{seeded[k].memory_id}" for k in ("second", "first"))
    assert page.locator(second).inner_text().startswith("current")
    assert "superseded" in page.locator(first).inner_text()
    page.click(f"{second} .chain-link a[href='{first}']")  # the chain link jumps to the older claim
    assert page.evaluate("location.hash") == first
    assert page.get_by_text("<script>alert('pwned')</script>").first.is_visible()  # shown as text
    assert page.locator("script:not([src])").count() == 0 and dialogs == []
    # long strings wrap: nothing pushes the page wider than the window
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert "4 entries" in page.locator("#runs + table, #runs ~ table").first.inner_text()
    screenshot(page, "compliance-overview")

    page.click("button:has-text('Erase this subject')")
    page.wait_for_selector("text=What will be erased")
    page.fill("input[name=subject_confirm]", SUBJECT)
    page.fill("textarea[name=note]", "ticket GDPR-12")
    screenshot(page, "compliance-confirm")
    page.fill("input[name=subject_confirm]", "cust-8")  # a typo is refused and erases nothing
    page.click("button:has-text('Erase permanently')")
    assert "does not match" in page.locator("[role=alert]").first.inner_text()
    with tenant_scope(tenant.tenant_id):
        assert not ErasureRequest.objects.exists()
    page.fill("input[name=subject_confirm]", SUBJECT)
    page.fill("textarea[name=note]", "ticket GDPR-12")
    page.click("button:has-text('Erase permanently')")

    page.wait_for_url("**/compliance/acme/erasures/*/")
    assert page.locator("#erasure-status").get_attribute("data-status") == "pending"  # no worker yet
    page.evaluate("window.stillThisPage = true")  # progress arrives by htmx polling, not by reloading
    processes.worker()  # a real Celery worker picks the request up from the broker
    page.wait_for_selector("#erasure-status[data-status=completed]", timeout=60_000)
    assert page.evaluate("window.stillThisPage") is True
    status = page.locator("#erasure-status").inner_text()
    assert "The final scan found nothing left in any store" in status and "memory_items" in status
    assert SUBJECT not in page.content()  # the receipt names the subject by digest only
    screenshot(page, "compliance-receipt")

    with page.expect_download() as download_info:
        page.click("text=Download JSON")
    saved = tmp_path / "receipt.json"
    download_info.value.save_as(saved)
    receipt = json.loads(saved.read_text())
    assert receipt["clean"] is True and receipt["counts"]["memory_items"] == 3 + len(HOSTILE)
    assert set(receipt["final_scan"].values()) == {0}
    with tenant_scope(tenant.tenant_id):
        assert not MemoryItem.objects.filter(subject_id=SUBJECT).exists()
    request_id = page.url.rstrip("/").rsplit("/", 1)[1]
    page.goto("/audit/")
    audit = page.locator("table").inner_text()
    assert "erase" in audit and request_id in audit and "ticket GDPR-12" in audit and SUBJECT not in audit
