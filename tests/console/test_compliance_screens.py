"""The compliance screens lead with the person: what Keeper holds about them in words (the tables
folded below), what waits on them and what an erasure will close for good; a failed erasure says
what is left in plain words and can be retried; a remembered fact leads to the event it came from."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from console.models import AuditEntry
from core.digests import subject_digest
from erasure.models import ErasureRequest
from memory.services import memory_remember
from runs.conversations.messages import conversation_append
from runs.engine.approvals import approval_check
from runs.engine.runs import run_start, run_suspend
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db
SUBJECT = "cust-88"


def _person(tenant: Any) -> Any:
    """A customer with a conversation waiting for an approval and a remembered preference."""
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=SUBJECT).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m1",
        body={"content": "Please write to me in Portuguese from now on."},
        actor="t",
    )
    memory_remember(
        tenant=tenant,
        subject_id=SUBJECT,
        namespace="preference",
        key="language",
        value="Portuguese",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    run_suspend(run_id=run.run_id, actor="t", reason="approval_required", detail="waiting for a person")
    approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request={"gift_card_minor": 500},
        request_digest="sha256:" + "ef" * 32,
        reasons=["goodwill"],
        actor="w1",
    )
    return run


def test_the_subject_page_leads_with_the_person_and_folds_the_tables(as_role, tenant):
    run = _person(tenant)
    page = as_role("compliance").get(
        reverse("console:compliance_home"), {"tenant": "acme", "subject": SUBJECT}
    )
    html = page.content.decode()
    holds = html[html.index('id="holds"') : html.index('id="technical"')]
    assert "1 conversation" in holds and "1 fact remembered" in holds
    assert "preference / language: “Portuguese”" in holds and "from their own words" in holds
    source = reverse("console:compliance_source", args=["acme", run.run_id])
    assert f'href="{source}?seq=2"' in holds
    assert "agent_runs." not in holds and "memory_postings" not in holds and "declared free" not in holds
    waiting = html[html.index('id="waiting-on"') :]
    assert "waiting for a person" in waiting and "Approval asked by conversation at step approve" in waiting
    assert '<details class="card" id="technical">' in html  # the technical table, folded


def test_before_erasing_the_page_says_what_the_erasure_closes_for_good(as_role, tenant):
    _person(tenant)
    page = as_role("compliance").get(reverse("console:compliance_erase", args=["acme"]), {"subject": SUBJECT})
    closes = page.content.decode().split('id="will-close"')[1].split("</section>")[0]
    assert "it stops and never continues" in closes and "closed without a decision" in closes
    assert "Approval asked by conversation at step approve" in closes


def test_a_remembered_fact_leads_to_the_event_it_came_from(as_role, tenant):
    run = _person(tenant)
    page = as_role("compliance").get(
        reverse("console:compliance_source", args=["acme", run.run_id]), {"seq": 2}
    )
    html = page.content.decode()
    assert page.status_code == 200 and 'class="focused" id="seq-focus"' in html
    assert "The person said:</strong> Please write to me in Portuguese from now on." in html
    assert (
        as_role("engineer").get(reverse("console:compliance_source", args=["acme", run.run_id])).status_code
        == 403
    )


def _failed(tenant: Any) -> ErasureRequest:
    """A request that ended with the subject's id left in one place (as the final scan records it)."""
    places = [
        {
            "place": "agent_events.actor",
            "what": "who wrote each run event",
            "erased_by": "",
            "before": 4,
            "after": 4,
            "runs": ["0b3f2c1a-run"],
        },
        {"place": "memory_items", "what": "memory claims", "erased_by": "memory", "before": 1, "after": 1},
    ]
    return ErasureRequest.objects.create(
        tenant=tenant,
        subject_id=SUBJECT,
        subject_digest=subject_digest(tenant_id=tenant.tenant_id, subject_id=SUBJECT),
        requested_by="user:compliance",
        status="failed",
        error='left behind: {"agent_events.actor":4}; the subject\'s memory is kept until nothing else holds their data',
        receipt={
            "clean": False,
            "counts": {},
            "final_scan": {"agent_events.actor": 4, "memory_items": 1},
            "places": places,
        },
    )


def test_a_failed_erasure_says_what_is_left_in_words_and_offers_a_retry(as_role, tenant):
    failed = _failed(tenant)
    compliance = as_role("compliance")
    url = reverse("console:compliance_erasure_detail", args=["acme", failed.request_id])
    html = compliance.get(url).content.decode()
    said_so = html[html.index('id="erasure-failed"') :]
    assert "Keeper could not erase everything" in said_so
    assert "who wrote each run event: 4 left, in run <code" in said_so
    assert "kept on purpose" in said_so and "Retry the erasure" in said_so
    retry = reverse("console:compliance_erasure_retry", args=["acme", failed.request_id])
    response = compliance.post(retry)
    failed.refresh_from_db()  # the same request goes back to a worker, to pick up where it stopped
    assert response.status_code == 302 and response["Location"] == url
    assert failed.status == "pending" and ErasureRequest.objects.count() == 1
    entry = AuditEntry.objects.get(action="erase_retry")
    assert entry.target_id == str(failed.request_id) and SUBJECT not in str(entry.details)
    # Retrying needs the role, and a request that did not fail is not retried.
    assert as_role("support").post(retry).status_code == 403
    compliance.post(retry)  # pending again now: not retried twice
    assert (
        ErasureRequest.objects.count() == 1 and AuditEntry.objects.filter(action="erase_retry").count() == 1
    )


def test_the_menu_leads_to_the_held_claims_of_the_users_tenant(as_role, tenant):
    compliance = as_role("compliance")
    page = compliance.get(reverse("console:compliance_home")).content.decode()
    assert 'href="/review/held/"' in page and 'href="/compliance/offboardings/"' in page
    response = compliance.get("/review/held/")
    assert response.status_code == 302 and response["Location"] == reverse(
        "console:held_claims", args=["acme"]
    )
    assert as_role("engineer").get("/review/held/").status_code == 403
