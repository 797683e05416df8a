"""A LangGraph thread shows in the console like any run: the run list, its page with the checkpoint
events, and the support inbox, which it enters only while it waits at an interrupt() for a person's
answer (given in the console or through the API, once, by the thread's tenant only)."""

from __future__ import annotations

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from console.models import AuditEntry
from core.api_auth import api_key_create
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.example import support_graph as support_graph_example
from runs.langgraph.example import support_thread_start
from runs.langgraph.interrupts import thread_interrupt_get
from runs.langgraph.models import LangGraphCheckpoint
from runs.langgraph.saver import KeeperSaver
from tests.api.conftest import key_client
from tests.console.conftest import as_role, make_user, role_users  # noqa: F401 - the fixtures
from tests.runs.langgraph.graphs import support_graph

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_engineer_reads_the_threads_checkpoints_on_its_run_page(as_role, tenant) -> None:  # noqa: F811
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        support_graph(saver).invoke(
            {"note": "parcel arrived broken", "log": []}, {"configurable": {"thread_id": "t-9"}}
        )
    finally:
        saver.close()
    run = AgentRun.objects.get(idempotency_key="langgraph:t-9")
    engineer = as_role("engineer")
    listing = engineer.get("/runs/")
    assert listing.status_code == 200 and str(run.run_id) in listing.content.decode()
    page = engineer.get(f"/runs/{run.run_id}/")
    assert page.status_code == 200
    # The graph's own checkpoints are recorded by their rows (no event each): the run page leads to them.
    assert 'id="langgraph-checkpoints"' in page.content.decode()
    checkpoints = engineer.get(f"/runs/{run.run_id}/langgraph/")
    assert checkpoints.status_code == 200
    assert checkpoints.content.decode().count("data-checkpoint=") >= 5
    assert not AgentEvent.objects.filter(run=run, event_type="langgraph_checkpoint").exists()
    inbox = as_role("support").get("/support/")
    assert inbox.status_code == 200 and str(run.run_id) not in inbox.content.decode()


# --- interrupts: the support inbox, the answer form, the API -----------------------------------------


def _interrupted(tenant, thread: str = "t-q", message: str = "Order A-1001 arrived broken") -> AgentRun:
    support_thread_start(tenant_id=tenant.tenant_id, thread_id=thread, message=message)
    return AgentRun.objects.get(tenant=tenant, idempotency_key=f"langgraph:{thread}")


def _form(run: AgentRun, **fields: str) -> dict[str, str]:
    thread = thread_interrupt_get(tenant_id=run.tenant_id, run_id=run.run_id)
    assert thread is not None
    ids = {"checkpoint_id": thread.checkpoint_id, "interrupt_id": thread.asked[0].interrupt_id}
    return {**ids, "kind": "text", "answer": "yes", "note": "", **fields}


def test_an_interrupted_thread_waits_in_the_support_inbox_with_its_question(as_role, tenant) -> None:  # noqa: F811
    run = _interrupted(tenant, message="Order A-1001 <script>alert(1)</script>")
    support = as_role("support")
    inbox = support.get("/support/").content.decode()
    row = inbox[inbox.index('id="questions"') : inbox.index('id="other"')]
    assert f'data-run="{run.run_id}"' in row and "Refund order A-1001 of 42.00 EUR to Ada?" in row
    page = support.get(f"/support/runs/{run.run_id}/").content.decode()
    assert 'id="langgraph-question"' in page and "customer_said" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_support_answers_once_and_the_answer_is_audited(as_role, tenant) -> None:  # noqa: F811
    run = _interrupted(tenant)
    support = as_role("support")
    url = f"/support/runs/{run.run_id}/langgraph/answer/"
    form = _form(run, kind="json", answer='{"approved": true}', note="photos checked")
    first = support.post(url, form)
    second = support.post(url, form)  # a double click
    assert (first.status_code, second.status_code) == (302, 302)
    answered = AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered")
    assert answered.count() == 1
    event = answered.get()
    assert event.payload["answer"] == {"approved": True} and event.actor == "user:support"
    audit = AuditEntry.objects.filter(action="langgraph_answer", target_id=str(run.run_id))
    assert audit.count() == 1 and audit.get().note == "photos checked"
    assert audit.get().details["answer_seq"] == event.seq
    run.refresh_from_db()
    assert run.suspend_reason == "langgraph_answered"
    assert str(run.run_id) not in support.get("/support/").content.decode()  # it waits for the graph now


@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        ({"kind": "json", "answer": "{not json"}, 422, "this is not JSON"),
        ({"interrupt_id": "someone-elses"}, 422, "another id"),
        ({"answer": ""}, 422, "This field is required"),
        # Refused as the API refuses them: recorded, a JSON null would resume the graph with None, and
        # a whole number past 64 bits would crash the graph's resume.
        ({"kind": "json", "answer": "null"}, 422, "cannot be null"),
        ({"kind": "json", "answer": '{"ticket": 1e20}'}, 422, "below 2**63"),
        # A field the page does not show as an input still says what was wrong.
        ({"kind": "yaml"}, 422, "kind: Select a valid choice"),
        ({"kind": "json", "answer": "[" * 100 + "]" * 100}, 422, "at most 64 levels"),  # was recorded
        ({"kind": "json", "answer": "[" * 5000 + "]" * 5000}, 422, "nests too deep"),
    ],
)
def test_a_bad_answer_is_a_form_error_and_stores_nothing(as_role, tenant, fields, status, says) -> None:  # noqa: F811
    run = _interrupted(tenant)
    before = AgentEvent.objects.filter(run=run).count()
    response = as_role("support").post(f"/support/runs/{run.run_id}/langgraph/answer/", _form(run, **fields))
    assert response.status_code == status and says in response.content.decode()
    assert AgentEvent.objects.filter(run=run).count() == before
    assert not AuditEntry.objects.filter(action="langgraph_answer").exists()


def test_only_support_of_the_tenant_may_answer(as_role, tenant, other_tenant, client) -> None:  # noqa: F811
    run = _interrupted(tenant)
    url = f"/support/runs/{run.run_id}/langgraph/answer/"
    assert as_role("engineer").post(url, _form(run)).status_code == 403
    stranger = make_user("stranger", "support", tenants=(other_tenant,))
    client.force_login(stranger)
    assert client.get(f"/support/runs/{run.run_id}/").status_code == 404
    assert client.post(url, _form(run)).status_code == 404
    assert str(run.run_id) not in client.get("/support/").content.decode()
    assert not AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").exists()


def test_the_api_answers_with_a_tenant_key_once(tenant, other_tenant) -> None:
    run = _interrupted(tenant)
    url = f"/api/v1/runs/{run.run_id}/langgraph/answer"
    mine = key_client(api_key_create(tenant=tenant, name="bot", scope="write").plaintext)
    theirs = key_client(api_key_create(tenant=other_tenant, name="bot", scope="write").plaintext)
    assert theirs.post(url, {"answer": "yes"}, format="json").status_code == 404
    bad = mine.post(url, '{"answer": ', content_type="application/json")
    assert bad.status_code == 400
    assert mine.post(url, {"answer": None}, format="json").status_code == 400
    huge = mine.post(url, {"answer": [1, {"n": 123456789012345678901234567890}]}, format="json")
    assert huge.status_code == 422 and "2**63" in huge.json()["error"]["message"]
    assert not AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").exists()
    first = mine.post(url, {"answer": {"approved": True}, "note": "ok"}, format="json")
    again = mine.post(url, {"answer": "no"}, format="json")
    assert (first.status_code, again.status_code) == (201, 200), first.content
    assert again.json()["answer"] == {"approved": True} and again.json()["seq"] == first.json()["seq"]
    assert first.json()["graph"] == "support_example"
    assert AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").count() == 1
    done = _interrupted(tenant, "t-none", message="hello")  # no order: no interrupt
    refused = mine.post(f"/api/v1/runs/{done.run_id}/langgraph/answer", {"answer": "yes"}, format="json")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "langgraph_no_open_interrupt"


# --- the engineer: checkpoints, state, diff, fork ---------------------------------------------------------


def test_the_engineer_reads_each_checkpoints_state_and_diff(as_role, tenant) -> None:  # noqa: F811
    run = _interrupted(tenant, "t-e1")
    engineer = as_role("engineer")
    assert f"/runs/{run.run_id}/langgraph/" in engineer.get(f"/runs/{run.run_id}/").content.decode()
    page = engineer.get(f"/runs/{run.run_id}/langgraph/")
    html = page.content.decode()
    assert page.status_code == 200 and html.count("data-checkpoint=") == 4  # input, model, lookup, approval
    latest = KeeperSaver(tenant_id=tenant.tenant_id).get_tuple({"configurable": {"thread_id": "t-e1"}})
    assert latest is not None
    assert f'data-checkpoint="{latest.config["configurable"]["checkpoint_id"]}" class="chosen"' in html
    assert "A-1001" in html and "$.order" in html  # the state, and the order the tool call added
    assert engineer.get(f"/runs/{run.run_id}/langgraph/?checkpoint=nope").status_code == 404
    assert as_role("support").get(f"/runs/{run.run_id}/langgraph/").status_code == 403


def test_a_fork_from_a_checkpoint_is_a_new_latest_checkpoint_the_graph_runs_on_from(as_role, tenant) -> None:  # noqa: F811
    run = _interrupted(tenant, "t-e2")
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: RunnableConfig = {"configurable": {"thread_id": "t-e2"}}
    graph = support_graph_example(saver)
    out = graph.invoke(Command(resume="no"), config)  # the person said no; the thread is done
    assert out["reply"].endswith("was not approved; a colleague will write to you.")
    before_approval = next(s for s in graph.get_state_history(config) if s.next == ("approval",))
    chosen = before_approval.config["configurable"]["checkpoint_id"]

    engineer = as_role("engineer")
    url = f"/runs/{run.run_id}/langgraph/fork/"
    assert engineer.post(url, {"checkpoint_id": chosen, "note": ""}).status_code == 422
    assert engineer.post(url, {"checkpoint_id": "1f0-none", "note": "x"}).status_code == 422
    assert not AuditEntry.objects.filter(action="langgraph_fork").exists()
    token = engineer.get(f"/runs/{run.run_id}/langgraph/?checkpoint={chosen}").context["request_token"]
    form = {"checkpoint_id": chosen, "note": "the customer sent photos", "request_token": token}
    response, again = (engineer.post(url, form) for _ in range(2))  # a double click: one fork
    assert response.status_code == again.status_code == 302 and response["Location"] == again["Location"]
    audit = AuditEntry.objects.get(action="langgraph_fork")
    forked = audit.details["checkpoint_id"]
    latest = saver.get_tuple(config)
    assert latest is not None and latest.config["configurable"]["checkpoint_id"] == forked
    assert latest.parent_config["configurable"]["checkpoint_id"] == chosen  # type: ignore[index]
    assert latest.metadata["source"] == "fork" and dict(latest.metadata)["forked_by"] == "user:engineer"
    assert (
        AgentEvent.objects.filter(run=run, event_type="langgraph_checkpoint", actor="user:engineer").count()
        == 1
    )
    # The graph runs on from the fork: it asks for the approval again, and the thread waits in the inbox.
    again = graph.invoke(None, config)
    saver.close()
    assert "__interrupt__" in again
    run.refresh_from_db()
    assert run.suspend_reason == "langgraph_interrupt"


def test_another_tenants_engineer_cannot_read_or_fork_the_thread(client, tenant, other_tenant) -> None:
    run = _interrupted(tenant, "t-e3")
    client.force_login(make_user("stranger", "engineer", tenants=(other_tenant,)))
    assert client.get(f"/runs/{run.run_id}/langgraph/").status_code == 404
    assert (
        client.post(f"/runs/{run.run_id}/langgraph/fork/", {"checkpoint_id": "x", "note": "y"}).status_code
        == 404
    )


# --- the engine's own resume, fork and rewind would break a thread -------------------------------------


def test_resume_fork_and_rewind_of_a_thread_are_refused_and_it_keeps_working(as_role, tenant) -> None:  # noqa: F811
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: RunnableConfig = {"configurable": {"thread_id": "t-out"}}
    try:
        support_graph(saver).invoke({"note": "parcel arrived broken", "log": []}, config)
        run = AgentRun.objects.get(idempotency_key="langgraph:t-out")
        events_before = AgentEvent.objects.filter(run=run).count()
        checkpoints_before = LangGraphCheckpoint.objects.filter(run=run).count()
        api = key_client(api_key_create(tenant=tenant, name="bot", scope="write").plaintext)
        for path, body in (
            ("resume", {"note": "x"}),
            ("fork", {"at_seq": 2, "start": True}),
            ("rewind", {"to_seq": 2}),
            # A message the graph would never read (it was stored with 201).
            ("messages/", {"type": "user_message", "client_message_id": "m-1", "content": "hello?"}),
        ):
            response = api.post(f"/api/v1/runs/{run.run_id}/{path}", body, format="json")
            assert response.status_code == 409, (path, response.content)
            assert response.json()["error"]["code"] == "run_driven_outside", response.json()
        engineer = as_role("engineer")
        page = engineer.get(f"/runs/{run.run_id}/").content.decode()
        assert 'id="driven-outside"' in page and 'id="fork-form"' not in page and ">Resume<" not in page
        assert "?fork_seq=" not in page  # no event offers a fork either (a dead end)
        refused = engineer.post(f"/runs/{run.run_id}/resume/", {"note": "x"})
        assert refused.status_code == 409 and "its own process drives its steps" in refused.content.decode()
        run.refresh_from_db()
        assert (run.status, run.suspend_reason) == ("suspended", "langgraph_thread")
        assert AgentEvent.objects.filter(run=run).count() == events_before  # nothing recorded
        assert AgentRun.objects.filter(tenant=tenant).count() == 1  # no fork was made
        # The thread goes on as if nobody had tried.
        support_graph(saver).invoke({"note": "and the box was wet", "log": []}, config)
        assert LangGraphCheckpoint.objects.filter(run=run).count() > checkpoints_before
    finally:
        saver.close()


def _erased_thread(tenant, thread_id: str, subject_id: str) -> AgentRun:
    """A thread of the subject's, run once, then the subject erased: its run."""
    from erasure.services import erasure_execute, erasure_request_create

    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "subject_id": subject_id}}
    try:
        support_graph(saver).invoke({"note": "parcel arrived broken", "log": []}, config)
    finally:
        saver.close()
    request = erasure_request_create(tenant=tenant, subject_id=subject_id, requested_by="user:compliance")
    assert erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id).status == "completed"
    return AgentRun.objects.get(tenant=tenant, workflow_name="langgraph")


def test_a_thread_whose_subject_was_erased_stays_out_of_the_support_inbox(as_role, tenant) -> None:  # noqa: F811
    run = _erased_thread(tenant, "t-gone", "cust-gone-1")
    assert run.status == "suspended" and run.suspend_reason == "subject_erased"
    assert str(run.run_id) not in as_role("support").get("/support/").content.decode()
    page = as_role("engineer").get(f"/runs/{run.run_id}/langgraph/").content.decode()
    assert "its subject was erased, and its checkpoints with them" in page and "the latest 0" not in page


def test_an_erased_thread_whose_id_named_the_subject_links_to_no_checkpoints_page(as_role, tenant) -> None:  # noqa: F811
    """Its run page links to no checkpoints page, which would answer 404 (the run's key, which holds
    the thread id, was erased)."""
    run = _erased_thread(tenant, "support-cust-gone-2", "cust-gone-2")
    page = as_role("engineer").get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="langgraph-checkpoints"' not in page and 'id="langgraph-checkpoints-erased"' in page
