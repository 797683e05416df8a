"""Conversation events, the Redis session window, and turns answered one at a time in order."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from core.artifacts import artifact_get
from runs.conversations.messages import conversation_append
from runs.conversations.sessions import session_key, session_window
from runs.engine.runs import run_cancel, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import flush_redis, wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat_run(tenant):
    return run_start(
        tenant=tenant,
        workflow_name="conversation",
        input={"system_prompt": "Be brief."},
        actor="test",
        subject="cust-7",
    ).run


def _say(tenant, run, cmid: str, text: str):
    return conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id=cmid,
        body={"content": text},
        actor="user:cust-7",
    )


def test_a_message_is_stored_once_per_client_message_id(tenant, chat_run):
    first, again = _say(tenant, chat_run, "m-1", "hello"), _say(tenant, chat_run, "m-1", "hello")
    assert first.created and not again.created and first.event.seq == again.event.seq
    assert AgentEvent.objects.filter(run=chat_run, event_type="user_message").count() == 1


def test_a_message_id_sent_again_with_other_text_is_a_conflict_not_a_silent_drop(tenant, chat_run):
    from core.errors import Conflict

    _say(tenant, chat_run, "m-1", "hello")
    with pytest.raises(Conflict) as refused:
        _say(tenant, chat_run, "m-1", "goodbye")
    assert refused.value.code == "client_message_id_reused" and refused.value.http_status == 409
    assert AgentEvent.objects.get(run=chat_run, client_message_id="m-1").payload["content"] == "hello"
    client = APIClient()
    client.force_login(
        get_user_model().objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    )
    answer = client.post(
        f"/api/v1/runs/{chat_run.run_id}/messages/",
        {"type": "user_message", "client_message_id": "m-1", "content": "goodbye again"},
        format="json",
    )
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "client_message_id_reused"


def test_a_large_tool_result_is_kept_by_digest_with_a_preview(tenant, chat_run, settings):
    settings.KEEPER_TOOL_RESULT_PREVIEW_CHARS = 100
    big = "line of output\n" * 1000
    event = conversation_append(
        tenant=tenant,
        run_id=chat_run.run_id,
        event_type="tool_result",
        client_message_id="t-1",
        body={"call_id": "c1", "tool": "search", "content": big},
        actor="agent",
    ).event
    assert event.payload["truncated"] is True and len(event.payload["preview"]) == 100
    assert set(event.payload["content_ref"]) == {"digest", "size"}  # a reference, no path
    assert (
        artifact_get(tenant_id=tenant.tenant_id, ref=event.payload["content_ref"]).decode() == big
    )  # nothing dropped


def test_messages_go_only_to_active_runs_of_the_same_tenant(tenant, other_tenant, chat_run):
    from core.errors import ApplicationError

    with pytest.raises(ApplicationError) as wrong_tenant:
        _say(other_tenant, chat_run, "m-x", "hi")
    assert wrong_tenant.value.code == "run_not_found"
    run_cancel(run_id=chat_run.run_id, actor="user:ops")
    with pytest.raises(ApplicationError) as closed:
        _say(tenant, chat_run, "m-y", "hi")
    assert closed.value.code == "invalid_transition"


def test_the_session_window_equals_postgres_even_after_a_redis_flush(tenant, chat_run, settings):
    settings.KEEPER_SESSION_WINDOW = 5
    for i in range(8):
        _say(tenant, chat_run, f"m-{i}", f"message {i}")
    expected = list(
        AgentEvent.objects.filter(run=chat_run, event_type="user_message")
        .order_by("-seq")
        .values_list("seq", flat=True)[:5]
    )[::-1]
    assert [e["seq"] for e in session_window(run=chat_run)] == expected
    assert session_key(chat_run) == f"session:{tenant.tenant_id}:cust-7:{chat_run.run_id}"
    flush_redis()
    assert [e["seq"] for e in session_window(run=chat_run)] == expected  # rebuilt from Postgres


def test_the_conversation_run_answers_each_message_in_order(tenant, chat_run):
    assert run_advance(run_id=chat_run.run_id, worker_id="w").status == "suspended"  # nothing to answer
    _say(tenant, chat_run, "m-1", "Refund 25.00 EUR please. Never call me by phone.")
    _say(tenant, chat_run, "m-2", "Order ord-1.")
    for _ in range(6):
        run_advance(run_id=chat_run.run_id, worker_id="w")
    answers = list(AgentEvent.objects.filter(run=chat_run, event_type="assistant_message").order_by("seq"))
    questions = list(AgentEvent.objects.filter(run=chat_run, event_type="user_message").order_by("seq"))
    assert [a.payload["in_reply_to"] for a in answers] == [q.seq for q in questions]
    assert "Never call me by phone" in answers[0].payload["content"]  # the constraint is carried structurally
    chat_run.refresh_from_db()
    assert (chat_run.status, chat_run.suspend_reason) == ("suspended", "awaiting_input")


class EchoResponder:
    """A responder of the test's own, plugged in by settings.BACKENDS["responder"]."""

    name = "echo-v1"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def respond(self, *, context, message: str) -> str:
        return f"{self.prefix} {message} ({context.total} tokens)"


def test_the_conversation_answers_with_the_responder_the_settings_name(tenant, chat_run, settings):
    backend = {"BACKEND": f"{__name__}.EchoResponder", "OPTIONS": {"prefix": "echo:"}}
    settings.BACKENDS = {**settings.BACKENDS, "responder": backend}
    _say(tenant, chat_run, "m-1", "hello there")
    run_advance(run_id=chat_run.run_id, worker_id="w")
    [answer] = AgentEvent.objects.filter(run=chat_run, event_type="assistant_message")
    assert answer.payload["responder"] == "echo-v1"
    assert answer.payload["content"].startswith("echo: hello there (")


def test_the_messages_api(tenant, chat_run):
    api = APIClient()
    api.force_authenticate(
        get_user_model().objects.create_user("ana", password="pw-for-tests", is_staff=True, is_superuser=True)
    )
    url = f"/api/v1/runs/{chat_run.run_id}/messages/"
    created = api.post(
        url, {"type": "user_message", "client_message_id": "a-1", "content": "hi"}, format="json"
    )
    replay = api.post(
        url, {"type": "user_message", "client_message_id": "a-1", "content": "hi"}, format="json"
    )
    assert (created.status_code, replay.status_code) == (201, 200)
    bad = api.post(url, {"type": "user_message", "client_message_id": "a-2", "content": ""}, format="json")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_content"
    assert api.post(url, {"type": "shout", "client_message_id": "a-3"}, format="json").status_code == 400
    nul = api.post(
        url, {"type": "user_message", "client_message_id": "a-4", "content": "a\u0000b"}, format="json"
    )
    assert nul.status_code == 422 and nul.json()["error"]["code"] == "not_json_serializable"
    page = api.get(url + "?after_seq=0").json()["results"]
    assert [m["event_type"] for m in page] == ["user_message"]
    context = api.get(f"/api/v1/runs/{chat_run.run_id}/context/").json()
    assert context["total"] == sum(context["parts"].values()) <= context["budget"]
    assert api.get(f"/api/v1/runs/{chat_run.run_id}/session/").json()["results"][0]["text"] == "hi"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_turns_across_two_workers_never_interleave(tenant, processes):
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="test").run
    processes.worker(concurrency=2)
    processes.worker(concurrency=2)
    processes.beat()
    wait_until(
        lambda: AgentRun.objects.get(pk=run.pk).suspend_reason == "awaiting_input",
        timeout=30,
        message="the run to wait for input",
    )
    barrier = threading.Barrier(4)

    def send(i: int) -> None:
        from django.db import connection

        barrier.wait()
        try:
            _say(tenant, run, f"c-{i}", f"concurrent message {i}")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_until(
        lambda: AgentEvent.objects.filter(run=run, event_type="assistant_message").count() == 4,
        timeout=60,
        message="four answers",
    )
    time.sleep(0.5)
    questions = list(AgentEvent.objects.filter(run=run, event_type="user_message").order_by("seq"))
    answers = list(AgentEvent.objects.filter(run=run, event_type="assistant_message").order_by("seq"))
    assert [a.payload["in_reply_to"] for a in answers] == [q.seq for q in questions]
    for question, answer in zip(questions, answers, strict=True):
        assert answer.seq > question.seq


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_and_transitions_leave_no_gap_in_the_log(tenant) -> None:
    """Regression: an event that copies the state digest must not read the previous event row,
    which a concurrent statement may have written after this one's snapshot."""
    from runs.engine.runs import run_suspend

    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    barrier = threading.Barrier(9)
    errors: list[Exception] = []

    def append(i: int) -> None:
        from django.db import connection

        barrier.wait()
        try:
            conversation_append(
                tenant=tenant,
                run_id=run.run_id,
                event_type="user_message",
                client_message_id=f"p-{i}",
                body={"content": f"m{i}"},
                actor="t",
            )
        except Exception as exc:  # collected: an unhandled thread error would hide the failure
            errors.append(exc)
        finally:
            connection.close()

    def suspend() -> None:
        from django.db import connection

        barrier.wait()
        try:
            run_suspend(run_id=run.run_id, actor="user:ops", reason="manual_review")
        finally:
            connection.close()

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)] + [
        threading.Thread(target=suspend)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    run.refresh_from_db()
    seqs = list(AgentEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.state_revision + 1)) and len(seqs) == 10


def test_an_assistant_message_may_name_the_user_message_it_answers_and_only_one_of_this_run(tenant, chat_run):
    from core.api_auth import api_key_create

    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='t', scope='write').plaintext}"
    )
    url = f"/api/v1/runs/{chat_run.run_id}/messages/"
    asked = client.post(
        url, {"type": "user_message", "client_message_id": "m-1", "content": "hi"}, format="json"
    )
    call = client.post(
        url, {"type": "tool_call", "client_message_id": "c-1", "call_id": "1", "tool": "t"}, format="json"
    )
    other = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t").run
    elsewhere = _say(tenant, other, "m-9", "a question of another run").event.seq
    answer = {"type": "assistant_message", "client_message_id": "a-1", "content": "hello"}
    for reply_to, why in (
        (call.json()["seq"], "a tool call"),
        (999, "no such event"),
        (elsewhere + 100, "another run's"),
        (0, "not a seq"),
        ("two", "not a number"),
    ):
        refused = client.post(url, {**answer, "in_reply_to": reply_to}, format="json")
        assert refused.status_code in (400, 422) and refused.json()["error"], why
    on_a_question = client.post(
        url,
        {"type": "user_message", "client_message_id": "m-2", "content": "?", "in_reply_to": 2},
        format="json",
    )
    assert on_a_question.status_code == 422 and on_a_question.json()["error"]["code"] == "invalid_in_reply_to"
    said = client.post(url, {**answer, "in_reply_to": asked.json()["seq"]}, format="json")
    assert said.status_code == 201 and said.json()["payload"]["in_reply_to"] == asked.json()["seq"]
    again = client.post(url, {**answer, "in_reply_to": asked.json()["seq"]}, format="json")
    assert again.status_code == 200 and again.json()["seq"] == said.json()["seq"]
    moved = client.post(url, {**answer, "in_reply_to": call.json()["seq"]}, format="json")
    assert moved.status_code == 422  # not a user message, whatever the id
    assert AgentEvent.objects.filter(run=chat_run, event_type="assistant_message").count() == 1
