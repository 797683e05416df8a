"""A graph's interrupt() makes its thread's run wait for a person; an answer is recorded once, and a
Keeper worker (a real Celery process) or the graph's own process resumes the graph with it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection, transaction
from langgraph.types import Command

from core.errors import ApplicationError
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.example import GRAPH, support_graph, support_thread_start
from runs.langgraph.interrupts import answered_redispatch, interrupt_answer, thread_interrupt_get
from runs.langgraph.models import LangGraphCheckpoint
from runs.langgraph.saver import KeeperSaver
from runs.langgraph.store import ANSWERED_REASON, INTERRUPT_REASON, THREAD_REASON
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _checkpointed_after_answer(run: AgentRun) -> bool:
    """The graph went on after the answer: a root checkpoint was put at or after the answer's event."""
    answered = AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").order_by("-seq")
    seq = answered.values_list("seq", flat=True).first()
    return (
        seq is not None
        and LangGraphCheckpoint.objects.filter(run=run, checkpoint_ns="", seq__gte=seq).exists()
    )


def _checkpoint(step: int) -> tuple[Any, Any]:
    """A root checkpoint of a graph's loop and its metadata (for puts made by hand)."""
    from langgraph.checkpoint.base import empty_checkpoint

    cp = empty_checkpoint()
    cp["channel_values"] = {"step": step}
    return cp, {"source": "loop", "step": step, "parents": {}}


def _start(
    tenant, thread: str = "t-1", message: str = "Order A-1001 arrived broken", subject_id: str = ""
) -> AgentRun:
    result = support_thread_start(
        tenant_id=tenant.tenant_id, thread_id=thread, message=message, subject_id=subject_id
    )
    assert "__interrupt__" in result
    return AgentRun.objects.get(tenant=tenant, idempotency_key=f"langgraph:{thread}")


def test_an_interrupt_makes_the_thread_wait_for_a_person(tenant) -> None:
    run = _start(tenant)
    assert (run.status, run.suspend_reason) == ("suspended", INTERRUPT_REASON)
    assert "Refund order A-1001 of 42.00 EUR to Ada?" in run.suspend_detail
    event = AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt").get()
    thread = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
    assert thread is not None and thread.open and thread.graph == GRAPH
    latest = LangGraphCheckpoint.objects.filter(run=run, checkpoint_ns="").order_by("-checkpoint_id").first()
    assert latest is not None
    assert thread.checkpoint_id == latest.checkpoint_id == event.payload["checkpoint_id"]
    assert thread.asked[0].value["order"]["order_id"] == "A-1001"


def test_a_thread_without_an_interrupt_waits_for_nobody(tenant) -> None:
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        out = support_graph(saver).invoke({"message": "hello"}, {"configurable": {"thread_id": "t-2"}})
    finally:
        saver.close()
    assert "__interrupt__" not in out
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-2")
    assert run.suspend_reason == THREAD_REASON
    assert not AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt").exists()


def test_the_graphs_own_process_takes_the_answer_and_resumes(tenant) -> None:
    saver = KeeperSaver(tenant_id=tenant.tenant_id)  # no registered graph: the answer waits for it
    config = {"configurable": {"thread_id": "t-3"}}
    try:
        support_graph(saver).invoke({"message": "A-1002 please"}, config)
        run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-3")
        assert saver.interrupt_answer("t-3") is None
        answer = interrupt_answer(
            tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:sam"
        )
        run.refresh_from_db()
        assert run.suspend_reason == ANSWERED_REASON
        pending = saver.interrupt_answer("t-3")
        assert pending is not None and pending.value == "yes" and pending.seq == answer.seq
        out = support_graph(saver).invoke(Command(resume=pending.resume), config)
    finally:
        saver.close()
    assert out["reply"] == "Your refund for order A-1002 is approved."
    run.refresh_from_db()
    assert run.suspend_reason == THREAD_REASON and run.suspend_detail == ""
    assert saver.interrupt_answer("t-3") is None
    # An answer without ids once the graph went on: the thread waits for none (not the earlier one back).
    with pytest.raises(ApplicationError) as late:
        interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="no", actor="user:sam")
    assert late.value.code == "langgraph_no_open_interrupt"


def test_an_interrupt_is_answered_once(tenant) -> None:
    run = _start(tenant, "t-4")
    thread = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
    assert thread is not None
    ids = {"checkpoint_id": thread.checkpoint_id, "interrupt_id": thread.asked[0].interrupt_id}
    first = interrupt_answer(
        tenant_id=tenant.tenant_id, run_id=run.run_id, answer="no", actor="user:a", **ids
    )
    again = interrupt_answer(
        tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:b", **ids
    )
    assert first.created and not again.created and (again.seq, again.value) == (first.seq, "no")
    # Without ids too, while the answer waits for the graph (a retried request): the first answer back.
    bare = interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:c")
    assert not bare.created and (bare.seq, bare.value) == (first.seq, "no")
    assert AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").count() == 1


@pytest.mark.parametrize(
    ("ids", "code"),
    [
        ({"interrupt_id": "not-this-one"}, "langgraph_no_open_interrupt"),
        ({"checkpoint_id": "1f0-old"}, "langgraph_no_open_interrupt"),
    ],
)
def test_an_answer_to_no_open_interrupt_is_refused_and_stores_nothing(tenant, ids, code) -> None:
    run = _start(tenant, "t-5")
    before = AgentEvent.objects.filter(run=run).count()
    with pytest.raises(ApplicationError) as refused:
        interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:a", **ids)
    assert refused.value.code == code and 400 <= refused.value.http_status < 500
    assert AgentEvent.objects.filter(run=run).count() == before


def test_another_tenant_cannot_answer(tenant, other_tenant) -> None:
    run = _start(tenant, "t-6")
    from core.tenancy import tenant_bind

    with tenant_bind(other_tenant.tenant_id), pytest.raises(ApplicationError) as refused:
        interrupt_answer(tenant_id=other_tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:x")
    assert refused.value.http_status == 404
    run.refresh_from_db()
    assert run.suspend_reason == INTERRUPT_REASON


@pytest.mark.slow
def test_a_worker_resumes_a_registered_graph_with_the_answer(tenant, processes) -> None:
    run = _start(tenant, "t-7")
    processes.worker()
    answer = interrupt_answer(
        tenant_id=tenant.tenant_id, run_id=run.run_id, answer={"approved": True}, actor="user:sam"
    )
    assert answer.created

    saver = KeeperSaver(tenant_id=tenant.tenant_id)

    def replied() -> bool:
        # The run stops waiting at the resumed graph's first checkpoint; its reply comes a few
        # supersteps later (each checkpoint written before the next runs: durability "sync").
        state = support_graph(saver).get_state({"configurable": {"thread_id": "t-7"}})
        return "reply" in state.values

    wait_until(replied, timeout=60, message=f"the worker to resume the graph\n{processes.logs()}")
    run.refresh_from_db()
    assert run.suspend_reason == THREAD_REASON
    state = support_graph(saver).get_state({"configurable": {"thread_id": "t-7"}})
    assert state.values["reply"] == "Your refund for order A-1001 is approved."
    assert _checkpointed_after_answer(run)


@pytest.mark.slow
def test_a_resume_the_broker_lost_is_sent_again_by_the_sweep(tenant, processes) -> None:
    from celery import current_app

    run = _start(tenant, "t-lost")
    interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:sam")
    assert current_app.control.purge() >= 1  # the wake-up is lost before any worker takes it
    assert answered_redispatch(grace=3600) == 0  # within the grace: a resume may still be coming
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_runs SET updated_at = updated_at - interval '1 hour' WHERE run_id = %s",
            [run.run_id],
        )
    assert answered_redispatch(grace=60) == 1
    assert answered_redispatch(grace=60) == 0  # claimed: sent again at most once per grace
    processes.worker()

    def resumed() -> bool:
        run.refresh_from_db()
        return run.suspend_reason == THREAD_REASON

    wait_until(resumed, timeout=60, message=f"the worker to resume the graph\n{processes.logs()}")
    assert _checkpointed_after_answer(run)


def test_two_answers_at_once_record_one(tenant) -> None:
    run = _start(tenant, "t-8")
    thread = thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id)
    assert thread is not None
    ids = {"checkpoint_id": thread.checkpoint_id, "interrupt_id": thread.asked[0].interrupt_id}
    barrier, answers = threading.Barrier(4), []

    def answer(value: str) -> None:
        try:
            barrier.wait()
            answers.append(
                interrupt_answer(
                    tenant_id=tenant.tenant_id, run_id=run.run_id, answer=value, actor=value, **ids
                )
            )
        finally:
            connection.close()

    workers = [threading.Thread(target=answer, args=(f"user:{i}",)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(answers) == 4 and sum(a.created for a in answers) == 1
    assert len({(a.seq, a.value) for a in answers}) == 1  # everyone gets the one answer recorded
    assert AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt_answered").count() == 1


def test_erasing_the_subject_erases_the_question_and_the_answer(tenant) -> None:
    from memory.erasure import erasure_execute, erasure_request_create
    from tests.runs.langgraph.test_threads import _copies

    subject, words = "cust-erase-9", "Ada Quince of 17 Quince Lane"
    support_thread_start(
        tenant_id=tenant.tenant_id,
        thread_id="t-9",
        message=f"A-1001 broken, says {words}",
        subject_id=subject,
    )
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-9")
    interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer=f"yes, {words}", actor="user:sam")
    assert _copies(tenant, "17 Quince Lane")  # in the question, the answer, the run's suspend detail
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt is not None
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    assert _copies(tenant, "17 Quince Lane") == {}


def test_a_checkpoint_stored_after_its_own_interrupt_keeps_the_thread_waiting(tenant) -> None:
    """LangGraph stores checkpoints in the background: an interrupt() on checkpoint 2 can arrive before
    checkpoint 2 itself. Checkpoint 2 then leaves the person's question open; checkpoint 3 closes it."""
    from langgraph.types import Interrupt

    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: Any = {"configurable": {"thread_id": "t-order", "checkpoint_ns": ""}}

    def run() -> AgentRun:
        return AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-order")

    try:
        first = saver.put(config, *_checkpoint(1), {})
        assert run().suspend_reason == THREAD_REASON
        second, meta = _checkpoint(2)
        at_second: Any = {"configurable": {**first["configurable"], "checkpoint_id": second["id"]}}
        saver.put_writes(at_second, [("__interrupt__", (Interrupt(value="Refund 42.00 EUR?"),))], "task-1")
        assert run().suspend_reason == INTERRUPT_REASON
        after = saver.put(first, second, meta, {})
        assert (run().suspend_reason, run().suspend_detail) == (INTERRUPT_REASON, "Refund 42.00 EUR?")
        saver.put(after, *_checkpoint(3), {})
        assert (run().suspend_reason, run().suspend_detail) == (THREAD_REASON, "")
    finally:
        saver.close()


def test_an_interrupt_waiting_on_a_later_checkpoints_put_sees_it_and_does_not_wait(tenant) -> None:
    """A graph's put locks the run's row and changes nothing on it: an interrupt() on checkpoint 1 whose
    writes wait for the put of checkpoint 2 must see checkpoint 2 once it commits (the thread moved past
    the question), which a statement whose snapshot predates its wait for the lock would not."""
    from langgraph.types import Interrupt

    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: Any = {"configurable": {"thread_id": "t-race", "checkpoint_ns": ""}}

    first = saver.put(config, *_checkpoint(1), {})
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-race")
    put_done, commit = threading.Event(), threading.Event()

    def later_put() -> None:
        try:
            with transaction.atomic():  # the put's lock is held until this commits
                saver.put(first, *_checkpoint(2), {})
                put_done.set()
                assert commit.wait(30)
        finally:
            connection.close()

    def interrupt() -> None:
        try:
            saver.put_writes(first, [("__interrupt__", (Interrupt(value="Refund 42.00 EUR?"),))], "task-1")
        finally:
            connection.close()

    putting = threading.Thread(target=later_put)
    asking = threading.Thread(target=interrupt)
    putting.start()
    try:
        assert put_done.wait(30)
        asking.start()
        wait_until(_waiting_for_a_lock, timeout=10, message="the interrupt to wait for the put's lock")
    finally:
        commit.set()
        putting.join(30)
        if asking.is_alive() or asking.ident is not None:
            asking.join(30)
        saver.close()
    run.refresh_from_db()
    assert (run.suspend_reason, run.suspend_detail) == (THREAD_REASON, "")
    assert not AgentEvent.objects.filter(run=run, event_type="langgraph_interrupt").exists()


def _waiting_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cursor.fetchone()[0] > 0


def test_erasure_erases_every_value_the_graph_asked_even_a_short_name(tenant) -> None:
    """The order the example graph looked up names its customer "Ada": three letters, shorter than any
    text erasure finds elsewhere. What the graph asked is the subject's whole, so none of it is left."""
    from memory.erasure import erasure_execute, erasure_request_create

    run = _start(tenant, "t-ada", subject_id="cust-ada-7")
    asked = AgentEvent.objects.get(run=run, event_type="langgraph_interrupt").payload
    assert '"Ada"' in json.dumps(asked)  # what the graph asked names the customer
    interrupt_answer(
        tenant_id=tenant.tenant_id, run_id=run.run_id, answer="ok, Ada", actor="user:sam", note="Ada"
    )
    request = erasure_request_create(tenant=tenant, subject_id="cust-ada-7", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt is not None and done.receipt["clean"] is True
    events = {e.event_type: e.payload for e in AgentEvent.objects.filter(run=run)}
    assert [i["value"] for i in events["langgraph_interrupt"]["interrupts"]] == ["[erased]"]
    assert [i["id"] for i in events["langgraph_interrupt"]["interrupts"]] == [
        i["id"] for i in asked["interrupts"]
    ]
    answered = events["langgraph_interrupt_answered"]
    assert (answered["answer"], answered["note"], answered["answered_by"]) == (
        "[erased]",
        "[erased]",
        "user:sam",
    )
    assert "Ada" not in json.dumps([e.payload for e in AgentEvent.objects.filter(run=run)])
    # No longer a thread anyone answers: 409 subject_erased, and it is not listed as waiting.
    with pytest.raises(ApplicationError) as refused:
        interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="no", actor="user:sam")
    assert refused.value.code == "subject_erased"
    assert thread_interrupt_get(tenant_id=tenant.tenant_id, run_id=run.run_id) is None


def test_the_example_remembers_the_outcome_about_its_subject_when_a_worker_resumes_it(tenant) -> None:
    """The answer given in the inbox is resumed by a worker (thread_resume, in this process): the graph
    gets the tenant's KeeperStore and the reply lands in the subject's memory, namespace "support"."""
    from runs.langgraph.memory_store import KeeperStore
    from runs.langgraph.resume import thread_resume

    run = _start(tenant, "t-mem", subject_id="cust-mem-1")
    interrupt_answer(tenant_id=tenant.tenant_id, run_id=run.run_id, answer="yes", actor="user:sam")
    assert thread_resume(tenant_id=tenant.tenant_id, run_id=run.run_id) is True
    store = KeeperStore(tenant_id=tenant.tenant_id)
    try:
        item = store.get(("memories", "cust-mem-1", "support"), "A-1001")
    finally:
        store.close()
    assert item is not None
    assert item.value == {"reply": "Your refund for order A-1001 is approved.", "approved": True}
    from memory.selectors import memory_subject_items

    [claim] = memory_subject_items(tenant=tenant, subject_id="cust-mem-1")
    assert claim.provenance["writer"] == f"graph:{GRAPH}"  # as when the graph's own process writes


def test_the_example_graph_runs_with_a_keeper_store_in_its_own_process(tenant) -> None:
    """As a graph's own process runs it: KeeperSaver and KeeperStore compiled in, the answer given as
    Command(resume=...). It raised InvalidNamespaceError (a namespace the store refuses)."""
    from runs.langgraph.memory_store import KeeperStore

    saver, store = KeeperSaver(tenant_id=tenant.tenant_id), KeeperStore(tenant_id=tenant.tenant_id)
    config: Any = {"configurable": {"thread_id": "t-own", "subject_id": "cust-own-1"}}
    try:
        graph = support_graph(saver, store=store)
        waiting = graph.invoke({"message": "A-1002 is late"}, config)
        [asked] = waiting["__interrupt__"]
        done = graph.invoke(Command(resume={asked.id: "no"}), config)
        assert done["reply"].endswith("was not approved; a colleague will write to you.")
        item = store.get(("memories", "cust-own-1", "support"), "A-1002")
        assert item is not None and item.value["approved"] is False
    finally:
        saver.close()
        store.close()


def test_erasure_leaves_the_codes_the_graph_showed_and_a_retry_is_clean(tenant) -> None:
    """What the graph showed beside its question (the order's status "delivered", its id) is the
    graph's data, not the subject's text: another run of the subject keeps it, including a key named
    after it ("delivered_at"), the receipt is clean, and erasing again is clean too."""
    from memory.erasure import erasure_execute, erasure_request_create

    run = _start(tenant, "t-codes", subject_id="cust-codes-9")
    asked = AgentEvent.objects.get(run=run, event_type="langgraph_interrupt").payload["interrupts"][0]
    assert asked["value"]["order"]["state"] == "delivered"  # shown beside the question
    order = {"order_id": "A-1001", "state": "delivered", "delivered_at": "2026-11-02", "currency": "EUR"}
    other = run_start(
        tenant=tenant, workflow_name="conversation", input={"order": order}, actor="t", subject="cust-codes-9"
    ).run
    interrupt_answer(
        tenant_id=tenant.tenant_id, run_id=run.run_id, answer="approve", actor="user:sam", note="Ada"
    )
    for attempt in range(2):
        request = erasure_request_create(
            tenant=tenant, subject_id="cust-codes-9", requested_by="user:compliance"
        )
        done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
        assert done.status == "completed" and done.receipt is not None and done.receipt["clean"], (
            attempt,
            done.error,
        )
        assert AgentRun.objects.get(run_id=other.run_id).state["order"] == order
    assert "Order A-1001 arrived broken" not in json.dumps(
        [e.payload for e in AgentEvent.objects.filter(run=run)]
    )
