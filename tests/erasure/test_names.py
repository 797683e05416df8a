"""Who acted, decided or holds a run, where that names the subject: keyed, wherever it is."""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from runs.conversations.messages import conversation_append
from runs.engine.approvals import approval_approve, approval_check
from runs.engine.runs import run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval
from tests.erasure.agreement import assert_registry_agrees

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECT = "cust-7a1b"


def _someone_elses_run(tenant, **kwargs) -> AgentRun:
    return run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", **kwargs).run


def _erase(tenant):
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    return erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)


def test_the_subject_as_actor_and_decider_in_other_runs_is_keyed_and_the_receipt_is_clean(tenant):
    """The demo's chat customer: a client that records the customer as the actor of their messages
    (user:cust-1003). Their own run, a run with no subject and another customer's run hold that
    actor; an approval another run asked for was decided in their name; an outside worker named
    after them let its lease run out. On main every one of these columns was declared free and the
    erasure failed for good ("left behind: agent_events.actor")."""
    theirs = _someone_elses_run(tenant, subject=SUBJECT)
    nobodys = _someone_elses_run(tenant)
    others = _someone_elses_run(tenant, subject="cust-other")
    for n, run in enumerate((theirs, nobodys, others)):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=f"m{n}",
            body={"content": "hello there"},
            actor=f"user:{SUBJECT}",
        )
    asked = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    run_suspend(run_id=asked.run_id, actor="t", reason="approval_required")
    pending = approval_check(
        run_id=asked.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request={"order_id": "o-1"},
        request_digest="sha256:a",
        reasons=["delivered"],
        actor="w1",
    ).approval
    approval_approve(approval_id=pending.approval_id, actor=f"user:{SUBJECT}", note="ok")
    run_advance(run_id=asked.run_id, worker_id="w1")  # the resume it asked for happens
    leased = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    assert (
        apply(
            m.LeaseTaken(
                run_id=leased.run_id, tenant_id=leased.tenant_id, owner=f"worker-{SUBJECT}", ttl=0.05
            )
        )
        is not None
    )
    time.sleep(0.1)  # the worker died: its lease ran out

    done = _erase(tenant)
    assert done.status == "completed" and done.receipt["clean"], done.error
    assert_registry_agrees(done.receipt)
    with tenant_scope(tenant.tenant_id):
        actors = set(
            AgentEvent.objects.filter(client_message_id__in=["m0", "m1", "m2"]).values_list(
                "actor", flat=True
            )
        )
        decided = Approval.objects.get(approval_id=pending.approval_id).decided_by
        approved = AgentEvent.objects.get(run_id=asked.run_id, event_type="approval_approved").actor
        lease_owner = AgentRun.objects.get(run_id=leased.run_id).lease_owner
        untouched = set(AgentEvent.objects.filter(actor="t").values_list("run_id", flat=True))
    # One keyed pseudonym for one name: the history still tells one actor from another.
    assert len(actors) == 1 and actors.pop().startswith("erased:")
    assert decided.startswith("erased:") and approved.startswith("erased:") and SUBJECT not in decided
    assert lease_owner is None  # given back; the run is dispatched again
    assert {nobodys.run_id, others.run_id, asked.run_id} <= untouched  # other actors keep their names
    assert (
        done.receipt["counts"]["runs.actors_keyed"] >= 3
        and done.receipt["counts"]["runs.deciders_keyed"] == 1
    )


def test_a_live_lease_in_the_subjects_name_says_what_to_do_and_a_retry_over_the_api_finishes(tenant):
    """A worker named after the subject still holds another run: the erasure cannot take its lease
    (the worker would go on under the same name), so it fails saying which run and what to do; once
    the worker has let go, a retry of the same request over the API completes it."""
    leased = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
    grant = apply(
        m.LeaseTaken(run_id=leased.run_id, tenant_id=leased.tenant_id, owner=f"worker-{SUBJECT}", ttl=60)
    )
    assert grant is not None
    failed = _erase(tenant)
    assert failed.status == "failed" and failed.receipt["final_scan"]["agent_runs.lease_owner"] == 1
    assert f"agent_runs.lease_owner (1 row), in runs {leased.run_id}: a worker" in failed.error
    assert (
        "stop that worker" in failed.error and f"erasure-requests/{failed.request_id}/retry" in failed.error
    )
    [row] = [p for p in failed.receipt["places"] if p["place"] == "agent_runs.lease_owner"]
    assert "stop that worker" in row["what_to_do"] and row["runs"] == [str(leased.run_id)]

    assert apply(
        m.LeaseReleased(run_id=leased.run_id, tenant_id=grant.tenant_id, owner=grant.owner, epoch=grant.epoch)
    )
    client = APIClient()
    key = api_key_create(tenant=tenant, name="compliance-bot", scope="write").plaintext
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    retried = client.post(f"/api/v1/erasure-requests/{failed.request_id}/retry")
    assert retried.status_code == 202 and retried.json()["status"] == "pending", retried.content
    assert retried.json()["error"] == "" and retried.json()["receipt"] is None
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=failed.request_id)  # the worker's task
    assert done.status == "completed" and done.receipt["clean"], done.error
    again = client.post(f"/api/v1/erasure-requests/{failed.request_id}/retry")
    assert again.status_code == 200 and again.json()["status"] == "completed"  # idempotent
    missing = client.post("/api/v1/erasure-requests/00000000-0000-4000-8000-000000000009/retry")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "erasure_request_not_found"
