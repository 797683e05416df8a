"""A LangGraph thread on KeeperSaver is a Keeper run: its checkpoints are events, another tenant cannot
read it (row-level security), and erasing the thread's subject leaves no trace of it."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from core.tenancy import tenant_bind, tenant_scope
from erasure.registry import registered_columns
from erasure.services import erasure_execute, erasure_request_create
from runs.engine.runs import run_cancel
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.models import LangGraphCheckpoint
from runs.langgraph.saver import KeeperSaver, ThreadClosed
from runs.langgraph.store import CHECKPOINT_EVENT, THREAD_REASON
from tests.runs.langgraph.conftest import run_coroutine
from tests.runs.langgraph.graphs import loop_graph, support_graph

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECT = "cust-5e1b07"
NOTE = "Ada Quince of 17 Quince Lane wants her money back"


def _run(tenant, thread: str = "t-1", subject: str = SUBJECT) -> dict:
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config = {"configurable": {"thread_id": thread, "subject_id": subject}}
    try:
        return support_graph(saver).invoke({"note": NOTE, "log": []}, config)
    finally:
        saver.close()


def test_a_thread_is_a_run_whose_checkpoints_are_its_rows(tenant) -> None:
    result = _run(tenant)
    assert result["log"][-1] == "answer: 3 notes"

    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-1")
    assert (run.workflow_name, run.status, run.suspend_reason, run.subject) == (
        "langgraph",
        "suspended",
        THREAD_REASON,
        SUBJECT,
    )
    events = list(AgentEvent.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # one log, no gaps
    # The graph's own checkpoints are recorded by their rows, not by an event each (the put's cost).
    assert not [e for e in events if e.event_type == CHECKPOINT_EVENT]
    rows = list(LangGraphCheckpoint.objects.filter(run=run).order_by("-checkpoint_id"))
    assert len(rows) == 5  # input, intake, lookup+policy, answer... as LangGraph made them
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    latest = saver.get_tuple({"configurable": {"thread_id": "t-1"}})
    assert latest is not None
    listed = [
        t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t-1"}})
    ]
    assert [r.checkpoint_id for r in rows] == listed
    assert rows[0].metadata["step"] == latest.metadata["step"]
    # Each row names the run's revision it was put at: the run's log before it.
    assert all(1 <= r.seq <= run.state_revision for r in rows)
    # The run's state names the thread (its latest checkpoint is the thread's); its digest is the
    # last event's.
    assert run.state["langgraph"]["thread_id"] == "t-1"
    assert run.state_revision == events[-1].seq and run.state_digest == events[-1].state_digest


def test_an_update_of_the_thread_is_an_event_naming_who_made_it(tenant) -> None:
    _run(tenant)
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-1")
    saver = KeeperSaver(tenant_id=tenant.tenant_id, actor="user:ana")
    try:
        config = support_graph(saver).update_state(
            {"configurable": {"thread_id": "t-1"}}, {"log": ["edited"]}
        )
    finally:
        saver.close()
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert event is not None and event.event_type == CHECKPOINT_EVENT and event.actor == "user:ana"
    assert event.payload["checkpoint_id"] == config["configurable"]["checkpoint_id"]
    assert event.payload["source"] == "update" and event.seq == run.state_revision + 1
    row = LangGraphCheckpoint.objects.get(run=run, checkpoint_id=event.payload["checkpoint_id"])
    assert row.seq == event.seq


def test_a_busy_thread_touches_its_run_at_most_once_a_minute(tenant) -> None:
    _run(tenant)
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:t-1")

    def touched_after_more_checkpoints(seconds_ago: int) -> bool:
        """The run last updated `seconds_ago`: does the graph's next invoke (five checkpoints) move it?"""
        AgentRun.objects.filter(run_id=run.run_id).update(
            updated_at=timezone.now() - timedelta(seconds=seconds_ago)
        )
        run.refresh_from_db()
        before = run.updated_at
        _run(tenant)
        run.refresh_from_db()
        return run.updated_at != before

    assert not touched_after_more_checkpoints(30)  # within the minute: the run's row is not written
    assert touched_after_more_checkpoints(120)


def test_another_tenant_cannot_read_the_thread(tenant, other_tenant) -> None:
    _run(tenant)
    theirs = KeeperSaver(tenant_id=other_tenant.tenant_id)
    config: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
    assert theirs.get_tuple(config) is None
    assert list(theirs.list(config)) == [] and list(theirs.list(None)) == []
    # Row-level security itself, not only the saver's own filter: raw SQL as the other tenant.
    with tenant_scope(other_tenant.tenant_id), connection.cursor() as cursor:
        for table in ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes", "agent_runs"):
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
            assert cursor.fetchone()[0] == 0, table
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM langgraph_checkpoints")
        assert cursor.fetchone()[0] == 5
    # The same thread id in the other tenant is another run; it never touches the first.
    _run(other_tenant, subject="someone-else")
    with tenant_bind(other_tenant.tenant_id):
        assert AgentRun.objects.filter(idempotency_key="langgraph:t-1").count() == 1
    assert AgentRun.objects.get(idempotency_key="langgraph:t-1").tenant_id == tenant.tenant_id


def _bytes_left(tenant, text: str) -> int:
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """SELECT (SELECT count(*) FROM langgraph_blobs WHERE position(convert_to(%(t)s, 'UTF8') IN blob) > 0)
                    + (SELECT count(*) FROM langgraph_writes WHERE position(convert_to(%(t)s, 'UTF8') IN blob) > 0)""",
            {"t": text},
        )
        return int(cursor.fetchone()[0])


def _copies(tenant, text: str) -> dict[str, int]:
    found = {}
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        for table, column in sorted(registered_columns()):
            cursor.execute(f"SELECT count(*) FROM {table} WHERE {column}::text ILIKE %s", [f"%{text}%"])  # noqa: S608
            if n := cursor.fetchone()[0]:
                found[f"{table}.{column}"] = n
    return found


def test_erasing_the_subject_leaves_no_trace_of_the_thread(tenant, tmp_path, monkeypatch) -> None:
    _run(tenant, thread="bystander", subject="someone-else")  # another customer, with the same words
    bystanders = _bytes_left(tenant, "17 Quince Lane")
    _run(tenant, thread=f"support-{SUBJECT}")  # a thread id built from the subject's id
    _run(tenant, thread="ticket-42")  # and one that only its configurable subject_id ties to them
    assert _bytes_left(tenant, "17 Quince Lane") > bystanders > 0
    assert "langgraph_checkpoints.thread_id" in _copies(tenant, SUBJECT)

    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)

    assert done.receipt is not None
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    places = {p["place"]: p for p in done.receipt["places"]}
    for name in ("langgraph_checkpoints.metadata", "langgraph_checkpoints.thread_id", "langgraph_blobs.blob"):
        assert places[name]["before"] > 0 and places[name]["after"] == 0, places[name]
    assert done.receipt["counts"]["langgraph.langgraph_blobs"] > 0
    assert _copies(tenant, SUBJECT) == {}
    # The bystander's thread still holds the same words (it is another person's); the subject's none.
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT thread_id FROM langgraph_blobs")
        assert [r[0] for r in cursor.fetchall()] == ["bystander"]
    assert _bytes_left(tenant, "17 Quince Lane") == bystanders
    # An erased thread takes no more checkpoints (its run is suspended subject_erased), and no more
    # writes: a graph still running when its subject is erased must not store its superstep's writes
    # (the person's words among them) after the receipt said clean.
    # Invoked again, the erased thread runs none of its nodes: finding no checkpoint, LangGraph would
    # start the thread afresh and run its nodes (a tool call among them) before the first put was
    # refused.
    calls = tmp_path / "calls"
    monkeypatch.setenv("KEEPER_LG_CALLS", str(calls))
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        with pytest.raises(ThreadClosed):
            support_graph(saver).invoke(
                {"note": "again 17 Quince Lane", "log": []}, {"configurable": {"thread_id": "ticket-42"}}
            )
        assert not calls.exists()
        latest: RunnableConfig = {
            "configurable": {"thread_id": "ticket-42", "checkpoint_ns": "", "checkpoint_id": "1"}
        }
        with pytest.raises(ThreadClosed):
            saver.put_writes(latest, [("note", "call 17 Quince Lane")], task_id="late-task")
    finally:
        saver.close()
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM langgraph_writes WHERE thread_id = 'ticket-42'")
        assert cursor.fetchone()[0] == 0
    assert _copies(tenant, SUBJECT) == {} and _bytes_left(tenant, "17 Quince Lane") == bystanders


def test_an_erased_thread_whose_id_held_the_subject_stays_closed(tenant, tmp_path, monkeypatch) -> None:
    """Erasure redacts a thread id built from the subject's id in its run's key; the saver still finds
    the thread's run, or a graph still running during the erasure would start a new run of the
    subject and write their data there, and a graph invoked again would run afresh."""
    thread = f"support-{SUBJECT}"
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    config: RunnableConfig = {"configurable": {"thread_id": thread, "subject_id": SUBJECT}}
    try:
        running = support_graph(saver).invoke({"note": NOTE, "log": []}, config)["log"]
        assert running
        latest = saver.get_tuple(config)
        assert latest is not None
        request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
        done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
        assert done.status == "completed" and done.receipt is not None and done.receipt["clean"] is True
        # The graph that was running puts its next checkpoint through the same saver (its run cached),
        # and a new saver (nothing cached) is refused alike.
        for writer in (saver, KeeperSaver(tenant_id=tenant.tenant_id)):
            with pytest.raises(ThreadClosed):
                writer.put(latest.config, latest.checkpoint, {"source": "loop", "step": 9, "parents": {}}, {})
        calls = tmp_path / "calls"
        monkeypatch.setenv("KEEPER_LG_CALLS", str(calls))
        with pytest.raises(ThreadClosed):
            support_graph(KeeperSaver(tenant_id=tenant.tenant_id)).invoke({"note": NOTE, "log": []}, config)
        assert not calls.exists()
        with pytest.raises(ThreadClosed):  # nor copied into a new thread (an empty one, of nobody)
            saver.copy_thread(thread, "copy-of-it")
    finally:
        saver.close()
    assert AgentRun.objects.filter(tenant=tenant, workflow_name="langgraph").count() == 1
    assert _copies(tenant, SUBJECT) == {}


def test_a_put_from_langgraphs_own_thread_leaves_no_tenant_on_its_connection(tenant) -> None:
    """LangGraph writes checkpoints from its own threads; each statement sets the tenant for its own
    transaction only, so the thread's connection is left with none (it sees nothing afterwards)."""
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    seen: dict[str, object] = {}

    def in_thread() -> None:
        saver.put(
            {"configurable": {"thread_id": "t-bg", "checkpoint_ns": ""}},
            {
                "v": 1,
                "id": "1f0-a",
                "ts": "2026-11-30T00:00:00+00:00",
                "channel_values": {"n": 1},
                "channel_versions": {"n": "1"},
                "versions_seen": {},
                "updated_channels": None,
            },
            {"source": "input", "step": -1, "parents": {}},
            {"n": "1"},
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('app.tenant_id', true), (SELECT count(*) FROM agent_runs)")
            seen["setting"], seen["runs"] = cursor.fetchone()
        seen["tuple"] = saver.get_tuple({"configurable": {"thread_id": "t-bg"}})

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    saver.close()
    assert seen["setting"] in ("", None) and seen["runs"] == 0
    assert isinstance(seen["tuple"], CheckpointTuple)
    assert seen["tuple"].checkpoint["channel_values"] == {"n": 1}


def test_a_long_lived_saver_does_not_keep_a_connection_per_background_thread(tenant) -> None:
    """LangGraph writes checkpoints from threads it starts for each invoke. A graph process that
    invokes many times with one saver must not keep each ended thread's connection open (an outside
    tester filled PostgreSQL's 100 slots in 16 invokes)."""

    def backends() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = current_user"
            )
            return cursor.fetchone()[0]

    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    graph = support_graph(saver)
    try:
        graph.invoke({"note": NOTE, "log": []}, {"configurable": {"thread_id": "lived-0"}})
        first = backends()
        held = []
        for i in range(1, 15):
            graph.invoke({"note": NOTE, "log": []}, {"configurable": {"thread_id": f"lived-{i}"}})
            held.append(len(saver._connections))
        assert backends() <= first + 3, (first, backends())
        assert max(held[5:]) <= max(held[:5]), held  # bounded by the threads alive, not growing
    finally:
        saver.close()


def test_a_saver_that_knew_a_deleted_thread_writes_to_the_thread_started_again(tenant) -> None:
    """One process deletes a thread and starts it again while another still knows the old run: the
    other's next checkpoint goes to the new run, as its writes do (it raised ThreadClosed before,
    taking any run of the thread for its own closed one)."""
    old, new = KeeperSaver(tenant_id=tenant.tenant_id), KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        support_graph(old).invoke({"note": NOTE, "log": []}, {"configurable": {"thread_id": "again"}})
        first = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:again").run_id
        new.delete_thread("again")
        support_graph(new).invoke({"note": NOTE, "log": []}, {"configurable": {"thread_id": "again"}})
        second = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:again").run_id
        assert second != first

        result = support_graph(old).invoke(
            {"note": NOTE, "log": []}, {"configurable": {"thread_id": "again"}}
        )
        assert result["log"][-1].startswith("answer:")
        assert AgentRun.objects.filter(tenant=tenant, idempotency_key="langgraph:again").count() == 1
        assert LangGraphCheckpoint.objects.filter(run_id=second).count() == 10
    finally:
        old.close()
        new.close()


def test_a_subject_whose_id_is_inside_another_subjects_id_or_text_can_be_erased(tenant) -> None:
    """Blobs are not matched as a byte substring: cust-10 would be "found" in cust-1001's thread, and
    42 in "42.00 EUR", and those erasures would fail every time, keeping the subject's memory
    forever."""
    import ormsgpack

    from erasure.erasers.langgraph import holds_id
    from memory.services import memory_remember
    from tests.memory.test_memory import said

    assert holds_id(ormsgpack.packb({"t": "call cust-10 back"}), "cust-10")
    assert not holds_id(ormsgpack.packb({"t": "thread of cust-1001"}), "cust-10")
    assert holds_id(ormsgpack.packb({"id": "42"}), "42") and not holds_id(ormsgpack.packb("42.00 EUR"), "42")

    _run(tenant, thread="support-cust-1001", subject="cust-1001")
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        config = {"configurable": {"thread_id": "support-cust-1001", "subject_id": "cust-1001"}}
        support_graph(saver).invoke({"note": "cust-1001 paid 42.00 EUR", "log": []}, config)
    finally:
        saver.close()
    for subject in ("cust-10", "42"):
        memory_remember(
            tenant=tenant, subject_id=subject, namespace="profile", key="name", value="Ada", provenance=said()
        )
        request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="user:compliance")
        done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
        assert done.receipt is not None
        left = {place: n for place, n in done.receipt["final_scan"].items() if n}
        assert done.status == "completed" and left == {}, (subject, left)
    assert _bytes_left(tenant, "cust-1001") > 0  # the other subject's thread is untouched


def test_a_thread_id_keeper_cannot_store_or_an_unknown_tenant_is_a_clear_error(tenant) -> None:
    """Not psycopg's DataError for a NUL in a thread id, nor the foreign key's IntegrityError for a
    tenant id that names no tenant, from deep inside the first invoke."""
    import uuid

    from core.errors import InvalidInput, NotFound

    for configurable in ({"thread_id": "a\x00b"}, {"thread_id": "t-nul", "subject_id": "cust\x00"}):
        with pytest.raises(InvalidInput, match="cannot hold a NUL character"):
            _run_config(KeeperSaver(tenant_id=tenant.tenant_id), configurable)
    with pytest.raises(InvalidInput, match="cannot hold a NUL character"):
        KeeperSaver(tenant_id=tenant.tenant_id).get_tuple({"configurable": {"thread_id": "\x00"}})
    with pytest.raises(NotFound, match="KeeperSaver takes an existing tenant's id"):
        _run_config(KeeperSaver(tenant_id=uuid.uuid4()), {"thread_id": "t-nowhere"})
    assert not AgentRun.objects.filter(
        idempotency_key__in=["langgraph:t-nul", "langgraph:t-nowhere"]
    ).exists()


def _run_config(saver: KeeperSaver, configurable: dict) -> dict:
    try:
        return support_graph(saver).invoke({"note": NOTE, "log": []}, {"configurable": configurable})
    finally:
        saver.close()


@pytest.mark.parametrize(("durability", "most"), [("sync", 2), ("async", None)])
def test_a_cancelled_thread_stops_its_graph_at_the_next_step_when_checkpoints_are_synchronous(
    tenant, durability, most
) -> None:
    """A cancel stops a graph with durability="sync" at its next step (the README's advice for graphs
    whose nodes act); under LangGraph's default ("async") the refusal comes when invoke returns, the
    invoke's nodes having run, and nothing after the cancel is stored either way."""
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    thread = f"loop-{durability}"
    acted: list[int] = []

    def each(n: int) -> None:
        acted.append(n)
        if n == 5:  # someone cancels the thread's run in the console while the graph runs
            canceller = threading.Thread(target=cancel)
            canceller.start()
            canceller.join()

    def cancel() -> None:
        try:
            with tenant_scope(tenant.tenant_id):
                runs = AgentRun.objects.filter(tenant=tenant, idempotency_key=f"langgraph:{thread}")
                deadline = time.monotonic() + 10
                while not runs.exists() and time.monotonic() < deadline:  # async: the first put may lag
                    time.sleep(0.01)
                run_cancel(run_id=runs.get().run_id, actor="user:sam")
        finally:
            connection.close()

    try:
        with pytest.raises(ThreadClosed):
            loop_graph(saver, steps=40, each=each).invoke(
                {"n": 0}, {"configurable": {"thread_id": thread}}, durability=durability
            )
    finally:
        saver.close()
    run = AgentRun.objects.get(tenant=tenant, idempotency_key=f"langgraph:{thread}")
    if most is not None:
        assert len(acted) <= 5 + 1 + most, acted
    else:
        assert len(acted) == 40  # documented: the invoke's nodes run, their checkpoints are refused
    stored = LangGraphCheckpoint.objects.filter(run=run).values_list("metadata", flat=True)
    assert max((m["step"] for m in stored), default=-1) <= 7  # async: maybe none before the cancel


def test_an_async_graph_closes_its_saver_with_aclose(tenant) -> None:
    """close() inside asyncio.run raises SynchronousOnlyOperation after ainvoke: aclose() does not."""

    async def graph() -> dict:
        saver = KeeperSaver(tenant_id=tenant.tenant_id)
        try:
            return await support_graph(saver).ainvoke(
                {"note": NOTE, "log": []}, {"configurable": {"thread_id": "t-async"}}
            )
        finally:
            await saver.aclose()
            await sync_to_async(lambda: connection.close())()  # the connection of the saver's thread

    assert run_coroutine(graph())["log"][-1] == "answer: 3 notes"
    assert LangGraphCheckpoint.objects.filter(thread_id="t-async").count() == 5
