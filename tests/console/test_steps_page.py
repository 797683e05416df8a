"""Steps as rows on the engineer's run page (input state digest, output, duration, attempt, error,
operation) and the run's history as a JSON download (the export_history document), audited."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from console.models import AuditEntry
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.operator.history import history_verify

pytestmark = pytest.mark.django_db


@pytest.fixture
def flaky_run(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 0
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 1}, actor="test").run
    for _ in range(2):
        run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert run.status == "completed"
    return run


def test_the_run_page_lists_each_step_execution_with_its_facts(as_role, flaky_run):
    html = as_role("engineer").get(reverse("console:run_detail", args=[flaky_run.run_id])).content.decode()
    steps = html.split('id="steps"')[1].split("</section>")[0]
    assert "2 executions" in steps
    failed = steps.split('id="step-2"')[1].split("</tr>")[0]
    assert 'data-outcome="error"' in failed and "retry in 0 s" in failed
    assert "RuntimeError: flaky failure on attempt 1" in failed
    assert f"{reverse('console:run_state', args=[flaky_run.run_id])}?rev=1" in failed  # its input state
    done = steps.split('id="step-3"')[1].split("</tr>")[0]
    assert 'data-outcome="completed"' in done and ">completed</span>" in done
    assert '<td class="n">2</td>' in done  # the second attempt
    assert re.search(r"<td class=\"n\" data-duration>(\d+ ms|[\d.]+ s)</td>", done)  # its duration
    assert 'class="step step-error"' in html and 'class="retry-wait"' in html  # and on the timeline


def test_the_history_download_is_the_export_document_and_is_audited(as_role, flaky_run):
    client = as_role("engineer")
    page = client.get(reverse("console:run_detail", args=[flaky_run.run_id])).content.decode()
    url = reverse("console:run_history_download", args=[flaky_run.run_id])
    assert f'href="{url}"' in page
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    assert f'filename="run-{flaky_run.run_id}-history.json"' in response["Content-Disposition"]
    document = json.loads(response.content)
    history_verify(document)  # the digest holds: import_history would take it
    assert [e["event_type"] for e in document["events"]] == ["run_started", "step_error", "run_completed"]
    [entry] = AuditEntry.objects.filter(action="export_history")
    assert (entry.actor, entry.target_id, entry.details["digest"]) == (
        "user:engineer",
        str(flaky_run.run_id),
        document["digest"],
    )


def test_the_history_download_needs_the_role_and_the_tenant(as_role, tenant, other_tenant):
    from core.tenancy import tenant_bind

    with tenant_bind(other_tenant.tenant_id):
        theirs = run_start(tenant=other_tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    mine = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    assert (
        as_role("support").get(reverse("console:run_history_download", args=[mine.run_id])).status_code == 403
    )
    url = reverse("console:run_history_download", args=[theirs.run_id])
    assert as_role("engineer").get(url).status_code == 404
    assert not AuditEntry.objects.filter(action="export_history").exists()


def test_a_step_time_past_the_calendar_draws_as_no_time():
    """A worker's wall time of 1e308 s, stored before spent figures were bounded, made the run's
    engineer page a 500 (OverflowError from timedelta) every time it was opened."""
    from datetime import UTC, datetime, timedelta

    from console.steps import _shifted

    at = datetime(2026, 12, 1, tzinfo=UTC)
    assert _shifted(at, -1.5) == at - timedelta(seconds=1.5)
    assert _shifted(at, -1e308) == at and _shifted(at, 1e12) == at
