"""The engineer's run page and list say what really happened: the run's input and result, what each
step changed, start and duration in the list (sortable, superseded runs marked), a resume that would
be refused again is not offered (nor asked), and a workflow's signals and queries are one click away."""

from __future__ import annotations

from uuid import uuid4

import pytest

from console.models import AuditEntry
from runs.engine.forks import run_rewind
from runs.engine.runs import run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun
from tests.console.test_engineer import detail, finish, start
from tests.console.test_support import _refused_run

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_the_input_the_result_and_what_each_step_changed(as_role, tenant):
    run = finish(start(tenant, n=2))
    page = as_role("engineer").get(detail(run)).content.decode()
    run_input = page[page.index('id="run-input"') : page.index('id="run-result"')]
    assert "&quot;n&quot;: 2" in run_input and "budgets" not in run_input
    assert "&quot;counted&quot;: 2" in page[page.index('id="run-result"') :]
    steps = page[page.index('id="steps"') : page.index('id="revisions"')]
    assert "$.remaining: 2 → 1" in steps and "$.remaining: 1 → 0" in steps  # each tick's own change


def test_the_list_has_start_and_duration_sorts_by_either_time_and_marks_superseded_runs(as_role, tenant):
    first, second = finish(start(tenant, n=1)), start(tenant, n=5)
    replaced = run_rewind(run_id=first.run_id, to_seq=2, actor="t", note="again", idempotency_key=None).run
    client = as_role("engineer")
    page = client.get("/runs/").content.decode()
    assert ">started</a>" in page and "<th>duration</th>" in page and " so far" in page
    row = page[page.index(f'data-run="{first.run_id}"') :].split("</tr>")[0]
    assert 'class="superseded"' in page and ">superseded</span>" in row
    oldest_first = client.get("/runs/", {"sort": "started_asc"})
    ids = [str(r.run_id) for r, _, _ in oldest_first.context["rows"]]
    assert ids.index(str(first.run_id)) < ids.index(str(second.run_id)) < ids.index(str(replaced.run_id))
    assert 'sort=started"' in oldest_first.content.decode()  # the header's next click: newest first


def test_a_resume_that_would_be_refused_again_is_neither_offered_nor_asked(as_role, tenant):
    run = _refused_run(tenant)
    client = as_role("engineer")
    page = client.get(detail(run)).content.decode()
    actions = page[page.index('id="actions"') : page.index("</section>", page.index('id="actions"'))]
    assert (
        "accept the changed state first" in actions and f'action="{detail(run, "run_resume")}"' not in actions
    )
    before = AgentEvent.objects.filter(run=run).count()
    refused = client.post(detail(run, "run_resume"), {"note": "go"})
    assert refused.status_code == 409 and "would be refused" in refused.content.decode()
    assert AgentEvent.objects.filter(run=run).count() == before and not AuditEntry.objects.filter(
        action="resume"
    )


def test_a_resume_says_it_was_asked_not_done(as_role, tenant):
    run = start(tenant)
    run_advance(run_id=run.run_id, worker_id="w")
    run_suspend(run_id=run.run_id, actor="t", reason="needs_look")
    response = as_role("engineer").post(detail(run, "run_resume"), {"note": "looked"}, follow=True)
    page = response.content.decode()
    assert (
        "Resume asked: a worker verifies the run before it continues" in page
        and "done" not in page.split('class="messages"')[1][:300]
    )


def _waiting_for_documents(tenant) -> AgentRun:
    run = run_start(
        tenant=tenant,
        workflow_name="demo.credit",
        subject="c-1",
        actor="t",
        input={
            "customer_id": "c-1",
            "current_limit_minor": 100,
            "requested_limit_minor": 200,
            "currency": "EUR",
        },
    ).run
    for _ in range(10):
        if run_advance(run_id=run.run_id, worker_id="w").outcome != "committed":
            break
    run.refresh_from_db()
    assert (run.suspend_reason, run.next_step) == ("signal", "wait_for_documents")
    return run


def test_a_signal_is_sent_once_per_form_and_audited(as_role, tenant):
    run = _waiting_for_documents(tenant)
    client = as_role("engineer")
    page = client.get(detail(run)).content.decode()
    assert 'id="signal-form"' in page and '<option value="documents_received">' in page
    form = {
        "name": "documents_received",
        "payload": '{"documents": ["p.pdf"]}',
        "note": "uploaded",
        "request_token": uuid4().hex,
    }
    sent = client.post(detail(run, "run_signal"), form, follow=True).content.decode()
    assert "Signal documents_received sent" in sent and "was waiting for it" in sent
    again = client.post(detail(run, "run_signal"), form, follow=True).content.decode()
    assert "This form was sent before" in again
    [event] = AgentEvent.objects.filter(run=run, event_type="signal_received")
    assert event.payload["payload"] == {"documents": ["p.pdf"]} and event.actor == "user:engineer"
    [entry] = AuditEntry.objects.filter(action="signal")
    assert (entry.target_id, entry.note, entry.details["signal"]) == (
        str(run.run_id),
        "uploaded",
        "documents_received",
    )
    bad = client.post(
        detail(run, "run_signal"), {**form, "payload": "{no", "request_token": uuid4().hex}, follow=True
    )
    assert "the payload is not JSON" in bad.content.decode()
    unknown = client.post(
        detail(run, "run_signal"), {**form, "name": "nope", "request_token": uuid4().hex}, follow=True
    )
    assert (
        "Signal nope refused" in unknown.content.decode()
        and AgentEvent.objects.filter(event_type="signal_received").count() == 1
    )


def test_a_query_answers_in_place_and_changes_nothing(as_role, tenant):
    run = _waiting_for_documents(tenant)
    client = as_role("engineer")
    before = AgentEvent.objects.filter(run=run).count()
    answer = client.get(
        detail(run, "run_query"), {"name": "progress"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="query-answer"
    )
    body = answer.content.decode()
    assert answer.status_code == 200 and "<html" not in body and "waiting for documents" in body
    full = client.get(detail(run, "run_query"), {"name": "nope"})
    assert (
        full.status_code == 404
        and "declares no query" in full.content.decode()
        and "<html" in full.content.decode()
    )
    assert AgentEvent.objects.filter(run=run).count() == before and not AuditEntry.objects.exists()
