"""Procedural memory: a run's answered turn becomes a proposed procedure (tool names and argument
types, no personal values, provenance to the run and its events); runs of the same shape share it; a
person confirms it before any context is offered it; the context counts it within its budget and cuts
it by whole steps; a rewound or erased source takes it back; the API answers bad input with a reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from memory.procedures.models import Procedure, ProcedureSource
from memory.procedures.services import procedure_confirm
from runs.conversations.compaction.tokens import token_counter
from runs.conversations.context import ContextBudget, context_build
from runs.conversations.messages import conversation_append
from runs.conversations.procedures import procedure_sources_sweep, run_procedures_learn
from runs.engine.forks import run_rewind
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun

pytestmark = pytest.mark.django_db


def _drive(run_id: Any) -> None:
    for _ in range(6):
        if run_advance(run_id=run_id).outcome != "committed":
            break


def _append(tenant, run, kind: str, cmid: str, body: dict[str, Any]) -> int:
    return conversation_append(
        tenant=tenant, run_id=run.run_id, event_type=kind, client_message_id=cmid, body=body, actor="client"
    ).event.seq


def _turn(tenant, subject: str, text: str, calls: list[tuple[str, dict[str, Any], bool]]) -> AgentRun:
    """A conversation whose client asked, recorded its tool calls and results, and got an answer."""
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    _drive(run.run_id)
    _append(tenant, run, "user_message", "m-1", {"content": text})
    for n, (tool, arguments, ok) in enumerate(calls):
        _append(
            tenant, run, "tool_call", f"c-{n}", {"call_id": f"call-{n}", "tool": tool, "arguments": arguments}
        )
        body = {"call_id": f"call-{n}", "tool": tool, "content": {"ok": ok}, "is_error": not ok}
        _append(tenant, run, "tool_result", f"r-{n}", body)
    _drive(run.run_id)
    return AgentRun.objects.get(run_id=run.run_id)


REFUND_CALLS = [
    ("lookup_order", {"order_id": "o-4411"}, True),
    ("propose_refund", {"order_id": "o-4411", "reason": "broken", "amount": 25}, True),
]


def _procedures(tenant) -> list[Procedure]:
    with tenant_scope(tenant.tenant_id):
        return list(Procedure.objects.filter(tenant=tenant).order_by("created_at"))


def _staff(tenant) -> APIClient:
    from core.roles import ENGINEER
    from tests.console.conftest import make_user

    client = APIClient()
    user = make_user("eng-p", ENGINEER, tenants=(tenant,))
    user.is_staff = True  # the API takes a staff session (or a key)
    user.save()
    client.force_authenticate(user)
    return client


def test_a_turn_that_solved_a_request_proposes_its_procedure_without_personal_values(tenant):
    run = _turn(tenant, "cust-anna", "Hi, order o-4411 for Anna arrived broken, refund please", REFUND_CALLS)
    learned = run_procedures_learn(run_id=run.run_id)
    assert (learned.proposed, learned.added) == (1, 0)
    [procedure] = _procedures(tenant)
    assert procedure.status == "proposed" and procedure.workflow_name == "conversation"
    assert procedure.steps == [
        {"tool": "lookup_order", "arguments": {"order_id": "string"}},
        {
            "tool": "propose_refund",
            "arguments": {"amount": "number", "order_id": "string", "reason": "string"},
        },
    ]
    assert procedure.trigger == ["order", "arrived", "broken", "refund"]
    stored = json.dumps([procedure.name, procedure.trigger, procedure.steps])
    assert (
        "4411" not in stored and "anna" not in stored.lower() and 'broken"' not in json.dumps(procedure.steps)
    )
    with tenant_scope(tenant.tenant_id):
        [source] = ProcedureSource.objects.filter(procedure=procedure)
    asked = AgentEvent.objects.get(run=run, event_type="user_message")
    reply = AgentEvent.objects.get(run=run, event_type="assistant_message")
    assert (source.run_id, source.request_seq, source.reply_seq) == (run.run_id, asked.seq, reply.seq)
    assert run_procedures_learn(run_id=run.run_id).unchanged == 1  # the same turn again is no new source


def test_runs_of_the_same_shape_share_one_procedure_and_a_failed_call_teaches_nothing(tenant):
    first = _turn(tenant, "cust-1", "My order arrived broken, refund it", REFUND_CALLS)
    second = _turn(tenant, "cust-2", "The parcel came broken: I want a refund", REFUND_CALLS)
    failed = _turn(tenant, "cust-3", "refund my broken order", [("lookup_order", {"order_id": "x"}, False)])
    for run in (first, second, failed):
        run_procedures_learn(run_id=run.run_id)
    [procedure] = _procedures(tenant)
    assert procedure.trigger == ["broken", "refund"]  # what the requests share
    with tenant_scope(tenant.tenant_id):
        assert ProcedureSource.objects.filter(procedure=procedure).count() == 2


def test_only_a_confirmed_procedure_is_offered_counted_within_its_budget(tenant):
    run_procedures_learn(
        run_id=_turn(tenant, "cust-1", "My order arrived broken, refund it", REFUND_CALLS).run_id
    )
    [procedure] = _procedures(tenant)
    asking = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="cust-9").run
    query = "the order came broken, can I get a refund?"
    assert context_build(run=asking, query=query).procedure is None  # proposed: nobody read it yet
    procedure_confirm(tenant=tenant, procedure_id=procedure.procedure_id, actor="user:eng", note="right")
    built = context_build(run=asking, query=query)
    assert built.procedure is not None and built.procedure["procedure_id"] == str(procedure.procedure_id)
    [text] = [m["content"] for m in built.messages if m["content"].startswith("[procedure")]
    assert "1. lookup_order(order_id: string)" in text and "2. propose_refund(" in text
    assert (
        built.parts["procedure"]
        == token_counter(None).count_message("system", text)
        == built.procedure["tokens"]
    )
    assert context_build(run=asking, query="what are your opening hours?").procedure is None
    # A short budget keeps whole steps and says what it left out; a budget too short leaves it out.
    step_one = context_build(
        run=asking, query=query, budget=ContextBudget(procedure=built.parts["procedure"] - 3)
    )
    assert step_one.procedure is not None and step_one.procedure["steps_offered"] == 1
    assert any("1 of 2 steps left out for room" in n for n in step_one.notes)
    none = context_build(run=asking, query=query, budget=ContextBudget(procedure=10))
    assert none.procedure is None and none.parts["procedure"] == 0
    assert any("left out for room" in n for n in none.notes)


def test_a_rewind_past_its_turn_invalidates_the_procedure_with_the_reason(tenant):
    run = _turn(tenant, "cust-1", "My order arrived broken, refund it", REFUND_CALLS)
    run_procedures_learn(run_id=run.run_id)
    [procedure] = _procedures(tenant)
    procedure_confirm(tenant=tenant, procedure_id=procedure.procedure_id, actor="user:eng")
    asked = AgentEvent.objects.get(run=run, event_type="user_message")
    run_rewind(run_id=run.run_id, to_seq=asked.seq - 1, actor="user:eng", note="take it back")
    asking = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="cust-9").run
    built = context_build(run=asking, query="my order arrived broken, refund")
    assert built.procedure is None
    assert any("not offered: its source runs changed" in n for n in built.notes)
    [procedure] = _procedures(tenant)
    assert procedure.invalidation_reason.startswith("source_rewound: event")
    assert procedure_sources_sweep() == 0  # nothing left for the beat


def test_the_beat_invalidates_a_procedure_whose_run_was_abandoned_as_a_fork(tenant):
    from runs.engine.forks import run_fork
    from runs.engine.runs import run_cancel

    parent = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="cust-f").run
    _drive(parent.run_id)
    parent.refresh_from_db()
    fork = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng")
    _drive(fork.run_id)
    _append(tenant, fork, "user_message", "m-1", {"content": "refund my broken order"})
    _append(
        tenant,
        fork,
        "tool_call",
        "c-0",
        {"call_id": "c0", "tool": "lookup_order", "arguments": {"order_id": "o"}},
    )
    _drive(fork.run_id)
    run_procedures_learn(run_id=fork.run_id)
    run_cancel(run_id=fork.run_id, actor="user:eng", note="dead end")
    assert procedure_sources_sweep() == 1
    [procedure] = _procedures(tenant)
    assert procedure.invalidation_reason.startswith("source_fork_abandoned")


def test_erasing_the_subject_erases_a_procedure_learned_only_from_their_runs(tenant):
    theirs = _turn(tenant, "cust-erase", "My order arrived broken, refund it", REFUND_CALLS)
    shared = _turn(tenant, "cust-erase", "where is my parcel", [("track_parcel", {"parcel": "p-1"}, True)])
    other = _turn(tenant, "cust-stays", "where is my parcel now", [("track_parcel", {"parcel": "p-2"}, True)])
    for run in (theirs, shared, other):
        run_procedures_learn(run_id=run.run_id)
    assert len(_procedures(tenant)) == 2
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"] is True
    counts = done.receipt["counts"]
    assert counts["memory_procedures.procedure_sources"] == 2 and counts["memory_procedures.procedures"] == 1
    [left] = _procedures(tenant)
    assert left.steps == [{"tool": "track_parcel", "arguments": {"parcel": "string"}}]
    with tenant_scope(tenant.tenant_id):
        assert list(ProcedureSource.objects.values_list("subject_id", flat=True)) == ["cust-stays"]


def test_the_api_lists_procedures_and_only_a_person_decides(tenant, other_tenant):
    run_procedures_learn(
        run_id=_turn(tenant, "cust-1", "My order arrived broken, refund it", REFUND_CALLS).run_id
    )
    [procedure] = _procedures(tenant)
    key = APIClient()
    key.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='ci', scope='write').plaintext}"
    )
    listed = key.get("/api/v1/memory/procedures/?status=proposed")
    assert listed.status_code == 200
    [row] = listed.json()["results"]
    assert row["steps"][0]["tool"] == "lookup_order" and row["sources"][0]["run_id"]
    assert key.get("/api/v1/memory/procedures/?status=maybe").status_code == 400
    refused = key.post(f"/api/v1/memory/procedures/{procedure.procedure_id}/confirm", {}, format="json")
    assert (
        refused.status_code == 403 and refused.json()["error"]["code"] == "procedure_decision_needs_a_person"
    )
    person = _staff(tenant)
    url = f"/api/v1/memory/procedures/{procedure.procedure_id}/"
    bad = person.patch(url, {"tenant": "acme", "trigger": 7}, format="json")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_procedure_trigger"
    edited = person.patch(
        url, {"tenant": "acme", "trigger": "refund broken order", "note": "n"}, format="json"
    )
    assert edited.status_code == 200 and edited.json()["version"] == 2
    assert edited.json()["trigger"] == ["refund", "broken", "order"]
    confirmed = person.post(f"{url}confirm", {"tenant": "acme", "note": "ok"}, format="json")
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "confirmed"
    assert confirmed.json()["decided_by"] == "user:eng-p"
    missing = person.post(
        "/api/v1/memory/procedures/00000000-0000-0000-0000-000000000000/confirm",
        {"tenant": "acme"},
        format="json",
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "procedure_not_found"
    other = APIClient()
    other.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=other_tenant, name='ci', scope='read').plaintext}"
    )
    assert other.get(url).status_code == 404  # another tenant's procedure does not exist for its key
    assert other.get("/api/v1/memory/procedures/").json()["results"] == []
    learned = key.post(f"/api/v1/runs/{AgentRun.objects.first().run_id}/procedures/learn", format="json")
    assert learned.status_code == 200 and learned.json()["unchanged"] == 1


def test_only_a_run_that_answered_a_turn_is_sent_to_learn_when_it_finishes(tenant):
    from runs.conversations.procedures import run_answered

    answered = _turn(tenant, "cust-1", "refund my broken order", REFUND_CALLS)
    countdown = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run
    _drive(countdown.run_id)
    assert AgentRun.objects.get(run_id=countdown.run_id).status == "completed"
    # A run of steps with no conversation would cost a learning task each for nothing to learn.
    assert run_answered(run_id=answered.run_id) is True
    assert run_answered(run_id=countdown.run_id) is False


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "behind-a-pooler"])
def test_the_completing_commit_says_whether_the_run_answered_and_the_worker_sends_it_to_learn(
    tenant, settings, prepared
):
    from tests.broker import task_queued
    from workers.tasks import advance_run

    settings.KEEPER_PREPARED_STATEMENTS = prepared  # without: the commit runs in a function
    answered, silent = (
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
        for _ in range(2)
    )
    _append(tenant, answered, "assistant_message", "a-1", {"content": "On it."})
    assert run_advance(run_id=silent.run_id, sliced=True).answered is (False if prepared else None)
    ended = run_advance(run_id=answered.run_id, sliced=True)
    assert (ended.status, ended.answered) == ("completed", True if prepared else None)
    assert AgentEvent.objects.filter(run_id=answered.run_id, event_type="assistant_message").count() == 1

    # The worker's task: the answer from the commit, or (behind a pooler) from one read.
    again = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
        for _ in range(2)
    ]
    _append(tenant, again[0], "assistant_message", "a-2", {"content": "Done."})
    for run in again:
        advance_run(str(run.run_id))
    assert [AgentRun.objects.get(run_id=r.run_id).status for r in again] == ["completed", "completed"]
    assert tuple(task_queued("workers.tasks.learn_procedures", r.run_id) for r in again) == (True, False)
