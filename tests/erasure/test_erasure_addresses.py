"""E-mail addresses in the subject's own runs, under any key: a receipt must not say clean while
{"contact": "zofia...@example.org"} stays in a run's state."""

from __future__ import annotations

import pytest

from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent

SUBJECT = "cust-address-5120"
EMAIL = "zofia.kowalska@example.org"


@pytest.mark.django_db
def test_an_address_under_any_key_of_the_subject_s_run_is_erased_and_a_shared_one_is_not_searched(tenant):
    """{"contact": "zofia...@example.org"} in the subject's run state must not stay after a receipt
    that says clean (as when only texts under free-text keys are the request's). Every address in the
    subject's own runs is erased; one that another customer's run holds too (a workflow's sender, a
    cc of the subject) stays there, theirs, and does not keep the receipt unclean (nor does a single
    cc keep the address in the subject's own run)."""
    from erasure.services import erasure_execute, erasure_request_create

    own = run_start(
        tenant=tenant,
        workflow_name="demo.countdown",
        input={"n": 3, "contact": EMAIL, "from": "noreply@shop.example.com", "cc": [f"<{EMAIL}>"]},
        actor="t",
        subject=SUBJECT,
    ).run
    other = run_start(
        tenant=tenant,
        workflow_name="demo.countdown",
        input={"n": 3, "from": "noreply@shop.example.com", "cc": EMAIL},
        actor="t",
        subject="cust-someone-else",
    ).run
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    own.refresh_from_db()
    other.refresh_from_db()
    assert EMAIL not in str(own.state) and own.state["contact"] == "[erased]"
    assert own.state["from"] == "[erased]"  # the subject's run: every address in it goes
    assert (other.state["from"], other.state["cc"]) == ("noreply@shop.example.com", EMAIL)  # theirs
    events = AgentEvent.objects.filter(run=own).values_list("payload", "state")
    assert not any(EMAIL in str(p) or EMAIL in str(s) for p, s in events)
