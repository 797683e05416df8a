"""Agent Inbox's convention for interrupt(): a HumanInterrupt is read as such (in a list or alone),
each choice it allows sends the HumanResponse LangGraph expects, and a choice it does not allow is
refused; in the support console, an edit's arguments come back as the types the graph proposed."""

from __future__ import annotations

import pytest

from console.models import AuditEntry
from core.errors import InvalidInput
from runs.kernel.models import AgentEvent
from runs.langgraph.inbox import inbox_answer, inbox_request, inbox_summary
from runs.langgraph.interrupts import thread_interrupt_get
from tests.console.conftest import as_role, role_users  # noqa: F401 - the fixtures
from tests.runs.langgraph.test_console import _interrupted

REQUEST = {
    "action_request": {
        "action": "refund",
        "args": {"order_id": "A-1", "amount_minor": 4200, "express": False},
    },
    "config": {"allow_accept": True, "allow_edit": True, "allow_respond": False, "allow_ignore": True},
    "description": "Refund order A-1?\nThe customer waited a week.",
    "customer_said": "it broke",
}


def test_a_human_interrupt_is_read_in_a_list_or_alone_and_anything_else_is_not():
    listed, alone = inbox_request([REQUEST]), inbox_request(REQUEST)
    assert listed is not None and alone is not None and listed.listed and not alone.listed
    assert listed.allowed == ("accept", "edit", "ignore") and listed.context == {"customer_said": "it broke"}
    assert inbox_summary([REQUEST]) == "Refund order A-1?"
    for other in ({"question": "ok?"}, "ok?", [REQUEST, REQUEST], {"action_request": "refund"}, None):
        assert inbox_request(other) is None and inbox_summary(other) is None


def test_each_choice_sends_the_response_langgraph_expects():
    asked = inbox_request([REQUEST])
    assert asked is not None
    assert inbox_answer(asked, "accept") == [{"type": "accept", "args": None}]
    assert inbox_answer(asked, "ignore") == [{"type": "ignore", "args": None}]
    edited = inbox_answer(asked, "edit", args={"order_id": "A-1", "amount_minor": 2000, "express": True})
    assert edited == [
        {
            "type": "edit",
            "args": {"action": "refund", "args": {"order_id": "A-1", "amount_minor": 2000, "express": True}},
        }
    ]
    with pytest.raises(InvalidInput, match="allows accept, edit, ignore, not response"):
        inbox_answer(asked, "response", text="call me")


@pytest.mark.django_db(transaction=True)
def test_an_edit_in_the_console_is_recorded_with_the_types_the_graph_proposed(as_role, tenant) -> None:  # noqa: F811
    run = _interrupted(tenant)
    thread = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
    assert thread is not None
    form = {
        "checkpoint_id": thread.checkpoint_id,
        "interrupt_id": thread.asked[0].interrupt_id,
        "choice": "edit",
        "arg:order_id": "A-1001",
        "arg:amount_minor": "2000",
        "arg:currency": "EUR",
    }
    support = as_role("support")
    bad = support.post(
        f"/support/runs/{run.run_id}/langgraph/answer/", {**form, "arg:amount_minor": "twenty"}
    )
    assert bad.status_code == 422 and "amount_minor: a whole number is expected" in bad.content.decode()
    response = support.post(f"/support/runs/{run.run_id}/langgraph/answer/", form)
    assert response.status_code == 302
    answered = AgentEvent.objects.get(run=run, event_type="langgraph_interrupt_answered")
    assert answered.payload["answer"] == [
        {
            "type": "edit",
            "args": {
                "action": "refund",
                "args": {"order_id": "A-1001", "amount_minor": 2000, "currency": "EUR"},
            },
        }
    ]
    assert AuditEntry.objects.get(action="langgraph_answer").details["choice"] == "edit"
    page = support.get(f"/support/runs/{run.run_id}/").content.decode()
    said = page[page.index('id="langgraph-answered"') :]
    assert "user:support</span> edited it (" in said and "amount_minor = 2000" in said


@pytest.mark.django_db(transaction=True)
def test_the_workflows_page_says_a_threads_run_goes_on_outside_keepers_workers(as_role, tenant) -> None:  # noqa: F811
    _interrupted(tenant)
    page = as_role("engineer").get("/workflows/").content.decode()
    section = page[page.index('data-workflow="langgraph"') :].split("</section>")[0]
    assert "go on outside Keeper&#x27;s workers" in section and "cannot continue" not in section
    assert "driven outside" in section
