"""Correcting a wrong reconciliation from the console, end to end with real worker processes: a refund
whose worker died after sending it, reconciled with a wrong reference the person ticked as checked,
stops at verify; the person corrects it to the provider's record and the run completes with it, the
payments sandbox holding one refund, sent once. Role, CSRF and a second click are refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from console.models import AuditEntry
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from tests.processes import wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _settled(run_id: Any, reason: str | None, timeout: float = 60) -> AgentRun:
    def there() -> bool:
        run = AgentRun.objects.get(run_id=run_id)
        return (
            run.status != "running"
            and run.resume_requested_at is None
            and (reason is None or run.suspend_reason == reason or run.status != "suspended")
        )

    wait_until(there, timeout=timeout, message=f"the run to stop ({reason})")
    return AgentRun.objects.get(run_id=run_id)


def _correct_form(html: str) -> dict[str, str]:
    revision = re.search(r'name="correct-expected_revision" value="(\d+)"', html)
    assert revision is not None, "the page offers no correction"
    return {"correct-expected_revision": revision[1], "correct-resume": "on"}


def test_a_wrong_reconciliation_is_corrected_and_the_run_completes_with_one_refund(
    tenant, live_server, processes, settings, as_role, tmp_path: Path
):
    sandbox = Sandbox(live_server.url + "/sandbox")
    settings.KEEPER_SANDBOX_URL = sandbox.url  # the console reads the provider's records too
    sandbox.order("o-fix")
    sandbox.fault("lookup_non_authoritative")
    env = {
        "KEEPER_SANDBOX_URL": sandbox.url,
        "KEEPER_CRASH_AT": "after_refund_request_sent",
        "KEEPER_CRASH_ONCE_DIR": str(tmp_path),
        "KEEPER_CRASH_STEP": "refund",
        "KEEPER_REFUND_AUTO_APPROVE_MINOR": "1000000",
        "KEEPER_SLICE_MS": "60000",
    }
    worker = processes.worker(pool="solo", env=env)
    processes.beat(env)
    run = run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-fix"}, actor="test").run
    wait_until(lambda: worker.poll() is not None, timeout=60, message="the worker to die after sending")
    processes.worker(pool="solo", env=env)
    run = _settled(run.run_id, "reconciliation_required")
    assert run.suspend_reason == "reconciliation_required", run.suspend_detail
    [refund] = sandbox.ledger("o-fix")
    op = ToolOperation.objects.get(operation_id="refund:o-fix")
    support = as_role("support")

    # A wrong reference, not among the provider's records, confirmed by ticking.
    reconciled = support.post(
        reverse("console:support_operation_reconcile", args=[op.pk]),
        {
            "outcome": "applied",
            "external_ref": "rf_misheard",
            "checked_by_hand": "on",
            "note": "the provider's support read it to me",
            "resume": "on",
        },
    )
    assert reconciled.status_code == 302, reconciled.content.decode()[-2000:]
    run = _settled(run.run_id, "verification_failed")
    assert run.suspend_reason == "verification_failed" and "rf_misheard" in run.suspend_detail

    # The run's page leads to the correction; the operation's page offers the provider's record.
    page = support.get(reverse("console:support_run", args=[run.run_id])).content.decode()
    assert "A reconciliation may be wrong" in page and "Correct the reconciliation of" in page
    html = support.get(reverse("console:support_operation", args=[op.pk])).content.decode()
    assert f'name="correct-pick" value="{refund["refund_id"]}"' in html
    form = {
        **_correct_form(html),
        "correct-outcome": "applied",
        "correct-pick": refund["refund_id"],
        "correct-note": "rf_misheard was misheard; the provider's ledger lists the refund",
    }
    url = reverse("console:support_operation_correct", args=[op.pk])
    assert as_role("engineer").post(url, form).status_code == 403
    support = as_role("support")
    corrected = support.post(url, form, follow=True)
    assert "Corrected." in corrected.content.decode()
    # The same form sent again (a second click): a clear refusal, not a second correction.
    again = support.post(url, form)
    assert again.status_code == 409 and "nothing was done twice" in again.content.decode()
    assert AgentEvent.objects.filter(run_id=run.run_id, event_type="reconciliation_corrected").count() == 1

    run = _settled(run.run_id, None)
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail)
    result = run.result or {}
    assert (result["outcome"], result["refund_id"]) == ("refunded", refund["refund_id"])
    assert len(sandbox.ledger("o-fix")) == 1
    op.refresh_from_db()
    assert (op.external_ref, op.attempts) == (refund["refund_id"], 1)  # sent once, by the worker that died
    assert [h["status"] for h in op.history].count("started") == 1
    audit = [
        (e.action, e.details["external_ref"], e.details["reference_check"])
        for e in AuditEntry.objects.filter(action__in=["reconcile", "correct_reconciliation"]).order_by("id")
    ]
    assert audit == [
        ("reconcile", "rf_misheard", "checked by hand"),
        ("correct_reconciliation", refund["refund_id"], "picked among the provider's records"),
    ]
    history = support.get(reverse("console:support_operation", args=[op.pk])).content.decode()
    table = history[history.index('id="reconciliations"') :]
    assert table.index("rf_misheard") < table.index(refund["refund_id"]) and "(replaced)" in table
    assert 'name="correct-outcome"' not in history  # a finished run is not corrected


def test_the_correction_needs_the_csrf_token(client, role_users, tenant, settings):
    settings.KEEPER_SANDBOX_URL = "http://127.0.0.1:9/sandbox"
    client.handler.enforce_csrf_checks = True
    client.force_login(role_users["support"])
    response = client.post(reverse("console:support_operation_correct", args=[1]), {"correct-note": "x"})
    assert response.status_code == 403
    assert not AuditEntry.objects.filter(action="correct_reconciliation").exists()
