"""Two tasks of one superstep that both call interrupt(): both questions wait for a person at once,
each answer is recorded under its own interrupt id, and the graph resumes with the map of all answers."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from core.api_auth import api_key_create
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.interrupts import thread_interrupt_get
from runs.langgraph.saver import KeeperSaver
from runs.langgraph.store import ANSWERED_REASON, INTERRUPT_REASON, THREAD_REASON
from tests.api.conftest import key_client
from tests.console.conftest import as_role, role_users  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db(transaction=True)


class Case(TypedDict):
    log: Annotated[list[str], operator.add]


def two_questions_graph(checkpointer: Any) -> Any:
    """start -> (refund, notify in one superstep, each asks a person) -> close."""

    def start(state: Case) -> dict[str, Any]:
        return {"log": ["start"]}

    def refund(state: Case) -> dict[str, Any]:
        return {"log": [f"refund: {interrupt({'question': 'Refund 42.00 EUR?'})}"]}

    def notify(state: Case) -> dict[str, Any]:
        return {"log": [f"notify: {interrupt({'question': 'Tell the courier?'})}"]}

    def close(state: Case) -> dict[str, Any]:
        return {"log": ["closed"]}

    graph = StateGraph(Case)
    for name, node in (("start", start), ("refund", refund), ("notify", notify), ("close", close)):
        graph.add_node(name, node)
    graph.add_edge(START, "start")
    graph.add_edge("start", "refund")
    graph.add_edge("start", "notify")
    graph.add_edge(["refund", "notify"], "close")
    graph.add_edge("close", END)
    return graph.compile(checkpointer=checkpointer)


def _questions(out: dict[str, Any]) -> dict[str, str]:
    return {i.value["question"]: i.id for i in out["__interrupt__"]}


def test_both_questions_show_and_the_graph_resumes_once_both_are_answered(as_role, tenant) -> None:  # noqa: F811
    saver = KeeperSaver(tenant_id=tenant.tenant_id)  # not registered: the graph's own process resumes
    config = {"configurable": {"thread_id": "t-two"}}
    try:
        out = two_questions_graph(saver).invoke({"log": []}, config)
        asked = _questions(out)
        assert set(asked) == {"Refund 42.00 EUR?", "Tell the courier?"}
        run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-two")
        assert run.suspend_reason == INTERRUPT_REASON

        # Both questions wait at once: for the service, the API and the support pages.
        thread = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
        assert thread is not None and thread.open
        assert {a.interrupt_id: a.value["question"] for a in thread.asked} == {v: k for k, v in asked.items()}
        url = f"/api/v1/runs/{run.run_id}/langgraph/answer"
        api = key_client(api_key_create(tenant=tenant, name="bot", scope="write").plaintext)
        waiting = api.get(url)
        assert waiting.status_code == 200, waiting.content
        assert {q["interrupt_id"]: q["value"]["question"] for q in waiting.json()["open"]} == {
            v: k for k, v in asked.items()
        }
        page = as_role("support").get(f"/support/runs/{run.run_id}/").content.decode()
        assert (
            "Refund 42.00 EUR?" in page and "Tell the courier?" in page and "2 questions of one step" in page
        )
        inbox = as_role("support").get("/support/").content.decode()
        row = inbox[inbox.index(f'data-run="{run.run_id}"') : inbox.index('id="other"')]
        assert "Refund 42.00 EUR?" in row and "Tell the courier?" in row

        # Without an id the API cannot tell which question is answered: 422, nothing recorded.
        unnamed = api.post(url, {"answer": "yes"}, format="json")
        assert unnamed.status_code == 422 and unnamed.json()["error"]["code"] == "langgraph_no_open_interrupt"

        # One answer is recorded under its id; the thread still waits for the other question.
        first = api.post(
            url,
            {
                "answer": "yes",
                "interrupt_id": asked["Refund 42.00 EUR?"],
                "checkpoint_id": thread.checkpoint_id,
            },
            format="json",
        )
        assert first.status_code == 201, first.content
        run.refresh_from_db()
        assert run.suspend_reason == INTERRUPT_REASON
        assert saver.interrupt_answer("t-two") is None  # nothing to resume with yet
        still = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
        assert still is not None and still.open
        assert [a.interrupt_id for a in still.asked] == [asked["Tell the courier?"]]
        assert [q["interrupt_id"] for q in api.get(url).json()["open"]] == [asked["Tell the courier?"]]
        assert run.suspend_detail == "1 of 2 questions answered; waiting: Tell the courier?"
        page = as_role("support").get(f"/support/runs/{run.run_id}/").content.decode()
        assert f'data-interrupt="{asked["Tell the courier?"]}"' in page
        assert f'data-interrupt="{asked["Refund 42.00 EUR?"]}"' not in page
        assert f'data-answered="{asked["Refund 42.00 EUR?"]}"' in page
        again = api.post(url, {"answer": "no", "interrupt_id": asked["Refund 42.00 EUR?"]}, format="json")
        assert again.status_code == 200 and again.json()["answer"] == "yes"  # answered once

        # The last answer completes the superstep's answers: the graph resumes with both, by id.
        last = api.post(url, {"answer": "no", "interrupt_id": asked["Tell the courier?"]}, format="json")
        assert last.status_code == 201, last.content
        run.refresh_from_db()
        assert run.suspend_reason == ANSWERED_REASON
        pending = saver.interrupt_answer("t-two")
        assert pending is not None
        assert pending.resume == {asked["Refund 42.00 EUR?"]: "yes", asked["Tell the courier?"]: "no"}
        done = two_questions_graph(saver).invoke(Command(resume=pending.resume), config)
    finally:
        saver.close()
    assert "__interrupt__" not in done
    assert sorted(done["log"]) == sorted(["start", "refund: yes", "notify: no", "closed"])
    run.refresh_from_db()
    assert run.suspend_reason == THREAD_REASON and run.suspend_detail == ""
    assert AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").count() == 2


def test_two_tasks_interrupting_at_once_never_deadlock(tenant) -> None:
    """Both tasks' writes must not hold the run's row FOR SHARE and then wait for each other to update
    it (a deadlock PostgreSQL breaks by failing one). Many threads, each a race."""
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    graph = two_questions_graph(saver)
    try:
        for i in range(30):
            out = graph.invoke({"log": []}, {"configurable": {"thread_id": f"race-{i}"}})
            assert set(_questions(out)) == {"Refund 42.00 EUR?", "Tell the courier?"}
    finally:
        saver.close()
