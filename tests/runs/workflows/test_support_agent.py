"""The support_agent workflow end to end: a model (the local OpenAI-protocol server, or the rule
stand-in) calls its tools in a real run against the payments sandbox, the approvals API and memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from memory.models import MemoryItem
from runs.conversations.context import context_build
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Approval, Summary, ToolOperation
from runs.workflows.support_agent import SUPPORT_BUDGET
from runs.workflows.support_model import RuleSupportAgent, SupportModelUnavailable, action_parse
from tests.chat_server import ChatServer
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sandbox(live_server, settings) -> Sandbox:
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 2.0
    settings.KEEPER_RETRY_BACKOFF = 0
    return Sandbox(settings.KEEPER_SANDBOX_URL)


@pytest.fixture
def api(db) -> APIClient:
    client = APIClient()
    client.force_authenticate(
        get_user_model().objects.create_user("sam", password="pw-for-tests", is_staff=True, is_superuser=True)
    )
    return client


def _model(settings, chat: ChatServer) -> None:
    backend = {
        "BACKEND": "runs.workflows.support_model.ModelSupportAgent",
        "OPTIONS": {"base_url": chat.url, "model": "small-model", "api_key": "k-test"},
    }
    settings.BACKENDS = {**settings.BACKENDS, "support_model": backend}


def _rules(settings) -> None:
    backend = {"BACKEND": "runs.workflows.support_model.RuleSupportAgent", "OPTIONS": {}}
    settings.BACKENDS = {**settings.BACKENDS, "support_model": backend}


class ScriptedChat(ChatServer):
    """The local OpenAI-protocol server answering each request with the next scripted JSON content."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        super().__init__()

    @property
    def reply(self) -> Any:
        # The handler records the request before it reads the reply: the n-th request gets script[n-1].
        n = len(self.requests)
        content = json.dumps(self.script[n - 1]) if 0 < n <= len(self.script) else "not json"
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    @reply.setter
    def reply(self, value: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[ScriptedChat]:
    server = ScriptedChat()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _start(tenant, subject: str = "cust-7") -> AgentRun:
    return run_start(
        tenant=tenant, workflow_name="support_agent", input={}, actor="test", subject=subject
    ).run


def _say(tenant, run: AgentRun, cmid: str, text: str) -> None:
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id=cmid,
        body={"content": text},
        actor=f"user:{run.subject}",
    )


def _drive(run: AgentRun, limit: int = 20) -> AgentRun:
    for _ in range(limit):
        if run_advance(run_id=run.run_id, worker_id="w-test").outcome != "committed":
            break
    run.refresh_from_db()
    return run


def _replies(run: AgentRun) -> list[dict[str, Any]]:
    events = AgentEvent.objects.filter(run=run, event_type="assistant_message").order_by("seq")
    return [e.payload for e in events]


def _refund_flow(tenant, sandbox: Sandbox, api: APIClient, order_id: str) -> AgentRun:
    """Ask for a refund, approve it through the API, and see exactly one refund in the ledger."""
    sandbox.order(order_id)
    run = _drive(_start(tenant))
    assert (run.status, run.suspend_reason) == ("suspended", "awaiting_input")
    # The customer's message comes through the conversation API, as a client sends it.
    said = api.post(
        f"/api/v1/runs/{run.run_id}/messages/",
        {
            "type": "user_message",
            "client_message_id": "m-1",
            "content": f"Hi, {order_id} arrived broken, refund please",
        },
        format="json",
    )
    assert said.status_code == 201
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "approval_required")
    approval = Approval.objects.get(run=run, status="pending")
    assert approval.request == {"order_id": order_id, "amount_minor": 2500, "currency": "EUR"}
    assert sandbox.ledger(order_id) == []  # nothing moves before a person says yes
    response = api.post(f"/api/v1/approvals/{approval.approval_id}/approve", {"note": "ok"}, format="json")
    assert response.status_code == 200
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "awaiting_input")
    [refund] = sandbox.ledger(order_id)
    op = ToolOperation.objects.get(run=run)
    assert (op.operation_id, op.status, op.external_ref) == (
        f"support-refund:{order_id}",
        "succeeded",
        refund["refund_id"],
    )
    [reply] = _replies(run)
    asked = AgentEvent.objects.get(run=run, event_type="user_message")
    assert reply["tools"] == ["lookup_order", "propose_refund"] and reply["in_reply_to"] == asked.seq
    return run


def test_the_model_calls_its_tools_in_a_real_run_and_one_refund_is_made(
    tenant, sandbox, api, scripted, settings
):
    chat = scripted
    _model(settings, chat)
    chat.script.extend(
        [
            {"tool": "lookup_order", "arguments": {"order_id": "o-200"}},
            {"tool": "propose_refund", "arguments": {"order_id": "o-200", "reason": "arrived broken"}},
            {"reply": "Your refund is on its way."},
            {"tool": "remember", "arguments": {"key": "contact_channel", "value": "email only"}},
            {"reply": "Noted, email only."},
        ],
    )
    run = _refund_flow(tenant, sandbox, api, "o-200")
    assert _replies(run)[0]["content"] == "Your refund is on its way."
    assert _replies(run)[0]["responder"] == "model-v1"
    # The model saw the order it looked up, and after the approval the refund's result.
    bodies = [r["body"] for r in chat.requests]
    assert all(r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer k-test" for r in chat.requests)
    assert '"amount_minor": 2500' in bodies[1]["messages"][-1]["content"]
    assert '"refunded": true' in bodies[2]["messages"][-1]["content"]
    assert bodies[0]["response_format"] == {"type": "json_object"}

    _say(tenant, run, "m-2", "Yes, please remember that I prefer email only")
    run = _drive(run)
    assert _replies(run)[-1]["content"] == "Noted, email only."
    item = MemoryItem.objects.get(subject_id="cust-7", namespace="preference", key="contact_channel")
    assert item.value == "email only"
    assert item.provenance["run_id"] == str(run.run_id) and item.provenance["event_seq"] is not None
    assert item.provenance["validation_method"] == "explicit_user_confirmation"
    assert len(chat.requests) == 5
    # The model's calls were charged to the steps that made them (core.chat's meter around a step).
    assert AgentEvent.objects.filter(run=run, payload__has_key="spent").exists()


def test_the_model_answering_outside_the_contract_is_refused_not_obeyed():
    with pytest.raises(SupportModelUnavailable):
        action_parse({"tool": "delete_everything", "arguments": {}})
    with pytest.raises(SupportModelUnavailable):
        action_parse({"tool": "remember", "arguments": {"key": 3}})
    assert action_parse({"reply": "hi"}).reply == "hi"


def test_a_long_dialog_compacts_and_the_preference_is_in_a_later_sessions_context(tenant, settings):
    _rules(settings)
    run = _drive(_start(tenant, subject="cust-9"))
    _say(tenant, run, "m-0", "Yes, remember that I prefer email, never phone calls")
    run = _drive(run)
    for i in range(1, 14):
        _say(tenant, run, f"m-{i}", f"Question {i}: " + "where is my parcel and when will it arrive? " * 6)
        run = _drive(run)
    assert len(_replies(run)) == 14
    assert Summary.objects.filter(run=run).exists()  # the dialog grew past the budget and was compacted
    # The last turns were answered from summaries plus a raw tail within the small recent budget.
    assert _replies(run)[-1]["context_tokens"]["summaries"] > 0
    item = MemoryItem.objects.get(subject_id="cust-9", namespace="preference", key="contact_channel")
    assert item.value == "email, never phone calls" and item.provenance["source_id"] == f"run:{run.run_id}"

    later = _drive(_start(tenant, subject="cust-9"))
    _say(tenant, later, "n-1", "Hello again")
    context = context_build(run=later, query="Hello again", budget=SUPPORT_BUDGET)
    assert any("email, never phone calls" in m["content"] for m in context.messages)


def test_the_rule_stand_in_runs_the_same_flow_offline(tenant, sandbox, api, settings):
    _rules(settings)
    run = _refund_flow(tenant, sandbox, api, "o-300")
    reply = _replies(run)[0]
    assert reply["responder"] == "rules-v1" and "rule-based stand-in" in reply["content"]
    assert "refund" in reply["content"] and "done" in reply["content"]


def test_the_rule_stand_in_says_what_it_is_and_looks_before_proposing():
    rules = RuleSupportAgent()
    first = rules.act(messages=[{"role": "user", "content": "refund ord-9 please"}], tools=[])
    assert (first.tool, first.arguments) == ("lookup_order", {"order_id": "ord-9"})
    plain = rules.act(messages=[{"role": "user", "content": "hello"}], tools=[])
    assert plain.reply is not None and "rules-v1" in plain.reply


def test_a_rejected_refund_sends_nothing_and_the_agent_says_so(tenant, sandbox, api, settings):
    _rules(settings)
    sandbox.order("o-400")
    run = _drive(_start(tenant))
    _say(tenant, run, "m-1", "Please refund o-400, it is the wrong size")
    run = _drive(run)
    approval = Approval.objects.get(run=run, status="pending")
    response = api.post(
        f"/api/v1/approvals/{approval.approval_id}/reject", {"note": "worn, not refundable"}, format="json"
    )
    assert response.status_code == 200
    run = _drive(run)
    assert (run.status, run.suspend_reason) == ("suspended", "awaiting_input")
    assert sandbox.ledger("o-400") == [] and not ToolOperation.objects.filter(run=run).exists()
    assert "not made: worn, not refundable" in _replies(run)[0]["content"]
