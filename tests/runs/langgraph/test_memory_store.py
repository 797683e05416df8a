"""KeeperStore: LangGraph's store on Keeper's long-term memory. Each op against the real database, the
write policy and provenance, ranking by the query, tenant isolation and erasure of the subject."""

from __future__ import annotations

import time
from typing import Any, TypedDict

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from core.tenancy import tenant_scope
from memory.erasure import erasure_execute, erasure_request_create
from memory.models import MemoryItem
from memory.projection import memory_project
from memory.selectors import memory_subject_items
from memory.services import SensitiveInference
from runs.kernel.models import AgentRun
from runs.langgraph.memory_store import DELETED, KeeperStore
from runs.langgraph.models import LangGraphCheckpoint
from runs.langgraph.saver import KeeperSaver

pytestmark = pytest.mark.django_db

SUBJECT = "cust-7f3a"


def _store(tenant, **options: Any) -> KeeperStore:
    return KeeperStore(tenant_id=tenant.tenant_id, actor="graph:support", **options)


def test_a_put_is_a_claim_about_the_subject_with_langgraph_provenance(tenant):
    store = _store(tenant)
    store.put(("memories", SUBJECT, "preferences"), "language", {"language": "english", "since": 2021})

    item = store.get(("memories", SUBJECT, "preferences"), "language")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("memories", SUBJECT, "preferences"),
        "language",
        {"language": "english", "since": 2021},
    )
    assert item.created_at == item.updated_at
    # Compliance sees it on the subject's page (the same selector), with where it came from.
    [claim] = memory_subject_items(tenant=tenant, subject_id=SUBJECT)
    assert (claim.namespace, claim.key) == ("preferences", "language")
    assert claim.provenance["source"] == "langgraph" and claim.provenance["writer"] == "graph:support"
    assert claim.provenance["source_id"] == "langgraph" and claim.provenance["run_id"] is None
    # Memory's write policy: a graph's write is an unvalidated inference by default, so it fades.
    assert claim.provenance["source_type"] == "model_inference" and claim.expires_at is not None
    assert store.get(("memories", "someone-else", "preferences"), "language") is None
    assert store.get(("memories", SUBJECT, "preferences"), "other") is None


def test_nested_labels_are_one_dotted_memory_namespace(tenant):
    store = _store(tenant)
    store.put(("memories", SUBJECT, "orders", "open"), "o-1", {"total": 12})
    [claim] = memory_subject_items(tenant=tenant, subject_id=SUBJECT)
    assert claim.namespace == "orders.open"
    assert store.get(("memories", SUBJECT, "orders", "open"), "o-1").value == {"total": 12}
    assert store.get(("memories", SUBJECT, "orders"), "o-1") is None


def test_a_namespace_outside_the_rule_is_refused_with_a_reason(tenant):
    store = _store(tenant)
    for namespace in (("memories", SUBJECT), ("notes", SUBJECT, "x")):
        with pytest.raises(InvalidNamespaceError, match="subject_id"):
            store.put(namespace, "k", {"a": 1})
    with pytest.raises(InvalidNamespaceError, match="periods"):  # "a.b" must not address ("a", "b")
        store.batch([PutOp(("memories", SUBJECT, "a.b"), "k", {"a": 1})])
    assert memory_subject_items(tenant=tenant, subject_id=SUBJECT) == []


def test_a_put_overwrites_keeping_created_at_and_a_delete_starts_anew(tenant):
    store = _store(tenant)
    namespace = ("memories", SUBJECT, "preferences")
    store.put(namespace, "language", {"language": "english"})
    first = store.get(namespace, "language")
    time.sleep(0.01)
    store.put(namespace, "language", {"language": "french"})
    second = store.get(namespace, "language")
    assert second.value == {"language": "french"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    # Keeper keeps the old value as superseded (history), not overwritten.
    history = memory_subject_items(tenant=tenant, subject_id=SUBJECT)
    assert [(c.value, c.invalidation_reason) for c in history] == [
        ({"language": "french"}, None),
        ({"language": "english"}, "superseded"),
    ]

    store.delete(namespace, "language")
    assert store.get(namespace, "language") is None
    assert store.search(("memories", SUBJECT)) == []
    assert memory_subject_items(tenant=tenant, subject_id=SUBJECT)[0].invalidation_reason == DELETED
    store.delete(namespace, "language")  # deleting what is gone is no error
    time.sleep(0.01)
    store.put(namespace, "language", {"language": "german"})
    third = store.get(namespace, "language")
    assert third.created_at == third.updated_at > second.updated_at  # a new claim, a new start


def test_sensitive_inferences_are_refused_unless_the_person_confirmed_them(tenant):
    with pytest.raises(SensitiveInference):
        _store(tenant).put(("memories", SUBJECT, "profile"), "mood", {"mood": "angry"})
    assert memory_subject_items(tenant=tenant, subject_id=SUBJECT) == []
    confirmed = _store(tenant, validation_method="explicit_user_confirmation")
    confirmed.put(("memories", SUBJECT, "profile"), "mood", {"mood": "calm"})
    assert confirmed.get(("memories", SUBJECT, "profile"), "mood").value == {"mood": "calm"}


def test_a_failed_write_keeps_nothing_of_its_batch(tenant):
    store = _store(tenant)
    with pytest.raises(SensitiveInference):
        store.batch(
            [
                PutOp(("memories", SUBJECT, "profile"), "city", {"city": "Oslo"}),
                PutOp(("memories", SUBJECT, "profile"), "health", {"health": "flu"}),
            ]
        )
    assert store.get(("memories", SUBJECT, "profile"), "city") is None


def _put_notes(store: KeeperStore) -> None:
    notes = {
        "n1": {"text": "prefers email over phone calls", "priority": 1, "kind": "contact"},
        "n2": {"text": "ordered a blue kettle in March", "priority": 3, "kind": "order"},
        "n3": {"text": "refund requested for the kettle lid", "priority": 5, "kind": "order"},
        "n4": {"text": "speaks Norwegian and English", "priority": 2, "kind": "profile"},
    }
    for key, value in notes.items():
        store.put(("memories", SUBJECT, "notes"), key, value)
    store.put(
        ("memories", "someone-else", "notes"), "n1", {"text": "kettle kettle kettle refund", "priority": 9}
    )


def test_search_ranks_the_subjects_claims_by_the_query(tenant):
    store = _store(tenant)
    _put_notes(store)
    memory_project(tenant=tenant)  # what the worker does after the writes commit

    hits = store.search(("memories", SUBJECT), query="kettle refund", limit=3)
    assert [h.key for h in hits][:2] == ["n3", "n2"]
    assert all(h.namespace == ("memories", SUBJECT, "notes") for h in hits)  # not the other subject's
    assert hits[0].score > hits[1].score > 0
    contact = store.search(("memories", SUBJECT, "notes"), query="email phone")
    assert contact[0].key == "n1"
    # Across the tenant's subjects when the prefix names none.
    assert store.search(("memories",), query="kettle refund", limit=1)[0].namespace[1] in {
        SUBJECT,
        "someone-else",
    }
    assert {h.namespace[1] for h in store.search(("memories",), query="kettle refund")} == {
        SUBJECT,
        "someone-else",
    }
    # Offset pages through the same ranking.
    ranked = [h.key for h in store.search(("memories", SUBJECT), query="kettle refund email", limit=10)]
    paged = [
        h.key for h in store.search(("memories", SUBJECT), query="kettle refund email", limit=1, offset=1)
    ]
    assert paged == ranked[1:2]


def test_search_filters_and_pages_without_a_query(tenant):
    store = _store(tenant)
    _put_notes(store)
    prefix = ("memories", SUBJECT)
    assert sorted(h.key for h in store.search(prefix, filter={"kind": "order"})) == ["n2", "n3"]
    assert sorted(h.key for h in store.search(prefix, filter={"priority": {"$gte": 2, "$lt": 5}})) == [
        "n2",
        "n4",
    ]
    assert sorted(h.key for h in store.search(prefix, filter={"kind": {"$ne": "order"}})) == ["n1", "n4"]
    assert store.search(prefix, filter={"kind": "order", "priority": 5})[0].key == "n3"
    assert [h.key for h in store.search(prefix, query="kettle", filter={"kind": "order"})] == [
        "n2",
        "n3",
    ] or [h.key for h in store.search(prefix, query="kettle", filter={"kind": "order"})] == ["n3", "n2"]
    newest_first = [h.key for h in store.search(prefix)]
    assert newest_first == ["n4", "n3", "n2", "n1"] and all(h.score is None for h in store.search(prefix))
    assert [h.key for h in store.search(prefix, limit=2, offset=1)] == ["n3", "n2"]
    assert store.search(("elsewhere",)) == [] and store.search(prefix, limit=0) == []
    assert len(store.search(())) == 5  # the whole store: every subject of the tenant


def test_list_namespaces_matches_prefix_suffix_and_depth(tenant):
    store = _store(tenant)
    store.put(("memories", "a", "prefs"), "k", {"v": 1})
    store.put(("memories", "a", "orders", "open"), "k", {"v": 1})
    store.put(("memories", "b", "prefs"), "k", {"v": 1})
    store.put(("memories", "b", "gone"), "k", {"v": 1})
    store.delete(("memories", "b", "gone"), "k")  # no current claim left: not listed

    assert store.list_namespaces() == [
        ("memories", "a", "orders", "open"),
        ("memories", "a", "prefs"),
        ("memories", "b", "prefs"),
    ]
    assert store.list_namespaces(prefix=("memories", "a")) == [
        ("memories", "a", "orders", "open"),
        ("memories", "a", "prefs"),
    ]
    assert store.list_namespaces(suffix=("prefs",)) == [
        ("memories", "a", "prefs"),
        ("memories", "b", "prefs"),
    ]
    assert store.list_namespaces(prefix=("memories", "*", "prefs")) == [
        ("memories", "a", "prefs"),
        ("memories", "b", "prefs"),
    ]
    assert store.list_namespaces(max_depth=2) == [("memories", "a"), ("memories", "b")]
    assert store.list_namespaces(limit=1, offset=1) == [("memories", "a", "prefs")]
    assert store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("other",)),))]) == [[]]


def test_another_tenants_store_sees_nothing(tenant, other_tenant):
    _put_notes(_store(tenant))
    memory_project(tenant=tenant)
    theirs = KeeperStore(tenant_id=other_tenant.tenant_id)
    assert theirs.get(("memories", SUBJECT, "notes"), "n1") is None
    assert theirs.search(()) == [] and theirs.search(("memories",), query="kettle refund") == []
    assert theirs.list_namespaces() == []
    # Their write under the same namespace and key is theirs alone.
    theirs.put(("memories", SUBJECT, "notes"), "n1", {"text": "globex note"})
    assert (
        _store(tenant).get(("memories", SUBJECT, "notes"), "n1").value["text"]
        == "prefers email over phone calls"
    )
    with tenant_scope(other_tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_items")  # row-level security itself
        assert cursor.fetchone()[0] == 1


def test_erasing_the_subject_leaves_the_store_nothing_and_the_scan_clean(tenant):
    store = _store(tenant)
    _put_notes(store)
    memory_project(tenant=tenant)
    store.put(("memories", SUBJECT, "notes"), "n2", {"text": "ordered a red kettle in March", "priority": 3})

    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)

    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    assert done.receipt["counts"]["memory_items"] == 5 and done.receipt["counts"]["memory_vectors"] == 4
    assert store.get(("memories", SUBJECT, "notes"), "n1") is None
    assert (
        store.search(("memories", SUBJECT)) == []
        and store.search(("memories", SUBJECT), query="kettle") == []
    )
    assert store.list_namespaces(prefix=("memories", SUBJECT)) == []
    with tenant_scope(tenant.tenant_id):
        assert not MemoryItem.objects.filter(value__text__icontains="kettle lid").exists()
    assert [h.namespace[1] for h in store.search(())] == ["someone-else"]  # the bystander stays


def test_a_subject_erased_may_be_told_anew_through_the_store(tenant):
    store = _store(tenant)
    store.put(("memories", SUBJECT, "preferences"), "language", {"language": "english"})
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    # Another claim, said anew later: the erased one's tombstone must not refuse every later write
    # that has no run (a store used outside a graph has none).
    store.put(("memories", SUBJECT, "preferences"), "channel", {"channel": "email"})
    assert store.get(("memories", SUBJECT, "preferences"), "channel").value == {"channel": "email"}


def test_async_batch_runs_the_same_ops(tenant):
    store = _store(tenant)

    async def work() -> list[Any]:
        await store.aput(("memories", SUBJECT, "prefs"), "tea", {"tea": "green"})
        return await store.abatch(
            [
                GetOp(("memories", SUBJECT, "prefs"), "tea"),
                SearchOp(("memories", SUBJECT), query="green tea"),
                ListNamespacesOp(),
                PutOp(("memories", SUBJECT, "prefs"), "tea", None),
                GetOp(("memories", SUBJECT, "prefs"), "tea"),
            ]
        )

    # As under an ASGI server: the store's calls run on this thread's connection (the test's data).
    got, found, namespaces, deleted, gone = async_to_sync(work)()
    assert got.value == {"tea": "green"} and [h.key for h in found] == ["tea"]
    assert namespaces == [("memories", SUBJECT, "prefs")] and deleted is None and gone is None


class Chat(TypedDict):
    said: str


@pytest.mark.django_db(transaction=True)
def test_a_graph_node_writes_through_the_store_with_its_thread_as_provenance(tenant):
    def remember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
        store.put(("memories", SUBJECT, "preferences"), "channel", {"channel": state["said"]})
        return {}

    graph = StateGraph(Chat)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    store = _store(tenant)
    try:
        compiled = graph.compile(checkpointer=saver, store=store)
        config = {"configurable": {"thread_id": "chat-1", "subject_id": SUBJECT}}
        # Sync durability: the input checkpoint (and so the thread's run) is kept before the node runs.
        compiled.invoke({"said": "email"}, config, durability="sync")
    finally:
        saver.close()
        store.close()
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:chat-1")
    [claim] = memory_subject_items(tenant=tenant, subject_id=SUBJECT)
    assert claim.value == {"channel": "email"}
    provenance = claim.provenance
    assert provenance["source_id"] == "langgraph:thread:chat-1" and provenance["thread_id"] == "chat-1"
    assert provenance["run_id"] == str(run.run_id) and provenance["node"] == "remember"
    # The checkpoint the node ran from: the thread's step-0 checkpoint (the input applied), stored
    # before the node ran in step 1.
    ran_from = LangGraphCheckpoint.objects.get(
        tenant_id=tenant.tenant_id, thread_id="chat-1", checkpoint_id=provenance["source_version"]
    )
    assert ran_from.metadata["step"] == 0
    assert provenance["source"] == "langgraph" and provenance["writer"] == "graph:support"
