"""Procedures in the console, in a real browser (Debian's chromium through Playwright): an engineer
reads a proposed procedure (its steps and the run it came from, text escaped), edits its trigger
words and confirms it with a note; each action is audited; compliance has no such page."""

from __future__ import annotations

import pytest

from console.models import AuditEntry
from core.tenancy import tenant_scope
from memory.procedures.models import Procedure
from runs.conversations.procedures import run_procedures_learn
from tests.console.conftest import dialogs_dismissed, screenshot
from tests.memory.test_procedures import REFUND_CALLS, _turn

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_engineer_edits_and_confirms_a_proposed_procedure(page_as, tenant):
    calls = [*REFUND_CALLS, ("<script>alert(1)</script>", {"x": 1}, True)]
    run = _turn(tenant, "cust-1", "My order arrived broken, refund it", calls)
    run_procedures_learn(run_id=run.run_id)
    with tenant_scope(tenant.tenant_id):
        procedure = Procedure.objects.get(tenant=tenant)
    page = page_as("engineer")
    dialogs = dialogs_dismissed(page)
    page.goto("/procedures/")
    page.wait_for_url("**/procedures/acme/")
    card = page.locator(f"section.procedure[data-procedure-id='{procedure.procedure_id}']")
    steps = card.locator("ol.steps li")
    assert steps.count() == 3 and steps.nth(0).inner_text() == "lookup_order(order_id: string)"
    assert steps.nth(2).inner_text().startswith("<script>alert(1)</script>(")  # shown as text, never run
    card.locator("summary:has-text('Learned from 1 run turn')").click()
    assert card.locator(f"a[href='/runs/{run.run_id}/']").count() == 1
    screenshot(page, "procedures-proposed")
    card.locator("summary:has-text('Edit name and trigger words')").click()
    card.locator("form.edit input[name=trigger]").fill("refund broken parcel")
    card.locator("form.edit input[name=note]").fill("parcels too")
    card.locator("form.edit button[type=submit]").click()
    page.wait_for_selector("text=Procedure saved as version 2.")
    card = page.locator(f"section.procedure[data-procedure-id='{procedure.procedure_id}']")
    card.locator("form.decide input[name=note]").fill("this is how refunds are done")
    card.locator("form.decide button[value=confirm]").click()
    page.wait_for_selector("text=Procedure confirmed.")
    with tenant_scope(tenant.tenant_id):
        procedure.refresh_from_db()
    assert (procedure.status, procedure.version, procedure.trigger) == (
        "confirmed",
        2,
        ["refund", "broken", "parcel"],
    )
    assert procedure.decided_by == "user:engineer"
    page.goto("/procedures/acme/?status=confirmed")
    assert page.locator(f"section.procedure[data-procedure-id='{procedure.procedure_id}']").count() == 1
    with tenant_scope(tenant.tenant_id):
        actions = list(
            AuditEntry.objects.filter(target_id=str(procedure.procedure_id))
            .order_by("at")
            .values_list("action", "note")
        )
    assert actions == [
        ("procedure_edit", "parcels too"),
        ("procedure_confirm", "this is how refunds are done"),
    ]
    assert dialogs == []


def test_a_confirm_without_csrf_or_role_changes_nothing(client, role_users, tenant):
    run_procedures_learn(run_id=_turn(tenant, "cust-1", "refund my broken order", REFUND_CALLS).run_id)
    with tenant_scope(tenant.tenant_id):
        procedure = Procedure.objects.get(tenant=tenant)
    url = f"/procedures/acme/{procedure.procedure_id}/decide/"
    client.force_login(role_users["compliance"])
    assert client.post(url, {"decision": "confirm", "note": "n"}).status_code == 403
    assert client.get("/procedures/acme/").status_code == 403
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["engineer"])
    assert strict.post(url, {"decision": "confirm", "note": "n"}).status_code == 403
    client.force_login(role_users["engineer"])
    assert client.post(url, {"decision": "confirm", "note": ""}).status_code == 422  # a note is needed
    with tenant_scope(tenant.tenant_id):
        assert Procedure.objects.get(tenant=tenant).status == "proposed"
