"""Search: ACL and tenant filtered in SQL, changes count on the very next search, snapshots replay
the exact source versions, and the hits reach the context builder with their provenance."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.digests import sha256_digest
from core.errors import InvalidInput
from core.tenancy import tenant_ensure, tenant_scope
from memory.embedders import HashingEmbedder
from retrieval.models import Chunk, Invalidation, RetrievalSnapshot
from retrieval.search import retrieval_search, vector_candidates
from retrieval.services import (
    UnknownPrincipal,
    document_acl_set,
    document_delete,
    document_index,
    principal_remove,
    principal_set,
)
from retrieval.snapshots import snapshot_replay
from retrieval.text_arm import text_candidates

pytestmark = pytest.mark.django_db

DOCS = {
    "policy-42": (b"Refunds are paid within 14 days. Gift cards are never refunded.", ["group:support"]),
    "salaries": (b"Salary bands for 2026: engineers earn refunds of nothing, only salaries.", ["group:hr"]),
    "handbook": (b"Everyone may read the handbook. Refunds questions go to support.", ["group:all"]),
}


def seed(tenant):
    for document_id, (text, acl) in DOCS.items():
        document_index(
            tenant=tenant,
            document_id=document_id,
            source_uri=f"s3://kb/{document_id}.txt",
            source_version="etag:1",
            data=text,
            media_type="text/plain",
            acl=acl,
            actor="user:test",
            wait=True,
        )
    principal_set(
        tenant=tenant, principal="user:ann", groups=["group:support", "group:all"], actor="user:test"
    )
    principal_set(tenant=tenant, principal="user:hal", groups=["group:hr", "group:all"], actor="user:test")


def documents(result) -> set[str]:
    return {h.document_id for h in result.hits}


def test_a_principal_sees_only_what_its_user_and_groups_may_read(tenant):
    seed(tenant)
    assert documents(retrieval_search(tenant=tenant, query="refunds", principal="user:ann")) == {
        "policy-42",
        "handbook",
    }
    assert documents(retrieval_search(tenant=tenant, query="refunds", principal="user:hal")) == {
        "salaries",
        "handbook",
    }


def test_removing_a_principal_from_the_acl_counts_on_the_very_next_search(tenant):
    seed(tenant)
    assert "policy-42" in documents(
        retrieval_search(tenant=tenant, query="refunds gift cards", principal="user:ann")
    )
    document_acl_set(tenant=tenant, document_id="policy-42", acl=["group:billing"], actor="user:admin")
    assert "policy-42" not in documents(
        retrieval_search(tenant=tenant, query="refunds gift cards", principal="user:ann")
    )
    with tenant_scope(tenant.tenant_id):
        event = Invalidation.objects.get(kind="acl_changed")
        assert event.details == {"added": ["group:billing"], "removed": ["group:support"]}
        assert list(Chunk.objects.filter(document_id_text="policy-42").values_list("acl", flat=True)) == [
            ["group:billing"]
        ]


def test_a_user_named_directly_in_the_acl_sees_the_document(tenant):
    seed(tenant)
    document_acl_set(tenant=tenant, document_id="salaries", acl=["group:hr", "user:ann"], actor="user:admin")
    assert "salaries" in documents(
        retrieval_search(tenant=tenant, query="salary bands", principal="user:ann")
    )


def test_a_membership_change_counts_on_the_very_next_search(tenant):
    seed(tenant)
    assert "policy-42" in documents(retrieval_search(tenant=tenant, query="gift cards", principal="user:ann"))
    principal_set(tenant=tenant, principal="user:ann", groups=["group:all"], actor="user:admin")
    assert "policy-42" not in documents(
        retrieval_search(tenant=tenant, query="gift cards", principal="user:ann")
    )
    principal_remove(tenant=tenant, principal="user:ann", actor="user:admin")
    with pytest.raises(UnknownPrincipal):
        retrieval_search(tenant=tenant, query="gift cards", principal="user:ann")
    with tenant_scope(tenant.tenant_id):
        assert list(
            Invalidation.objects.filter(kind="membership_changed").values_list("principal", flat=True)
        ) == ["user:ann", "user:ann"]


@pytest.mark.parametrize(
    ("principal", "query", "k", "error"),
    [
        ("user:nobody", "refunds", 5, UnknownPrincipal),
        ("group:support", "refunds", 5, InvalidInput),
        ("ann", "refunds", 5, InvalidInput),
        ("user:ann", "   ", 5, InvalidInput),
        ("user:ann", "x" * 4001, 5, InvalidInput),
        ("user:ann", "refunds", 0, InvalidInput),
        ("user:ann", "refunds", 101, InvalidInput),
    ],
)
def test_bad_searches_are_refused_and_store_no_snapshot(tenant, principal, query, k, error):
    seed(tenant)
    with pytest.raises(error):
        retrieval_search(tenant=tenant, query=query, principal=principal, k=k)
    with tenant_scope(tenant.tenant_id):
        assert not RetrievalSnapshot.objects.exists()


def test_a_search_stores_a_snapshot_as_chapter_33_lays_it_out(tenant):
    seed(tenant)
    result = retrieval_search(tenant=tenant, query="gift cards refunds", principal="user:ann", k=3)
    snapshot = result.snapshot
    assert snapshot.snapshot_id.startswith("rs_") and snapshot.query_digest == sha256_digest(
        "gift cards refunds"
    )
    assert snapshot.acl_principal == f"tenant:{tenant.tenant_id}/user:ann"
    assert snapshot.index_version.startswith("chunker-v1/hashing:")
    first = snapshot.hits[0]
    assert set(first) == {
        "document_id",
        "source_uri",
        "source_version",
        "chunk_id",
        "content_digest",
        "retrieved_at",
        "score",
    }
    assert first["document_id"] == "policy-42" and first["chunk_id"] == "policy-42:s1:c1"
    assert first["content_digest"] == sha256_digest(result.hits[0].text)
    assert "text" not in first  # the snapshot keeps provenance, not the text
    # What the search returns is what it stored, in the same statement as it read the hits.
    stored = RetrievalSnapshot.objects.get(snapshot_id=snapshot.snapshot_id)
    fields = ("run_id", "query_digest", "index_version", "acl_principal", "k", "hits", "created_at")
    assert [getattr(stored, f) for f in fields] == [getattr(snapshot, f) for f in fields]
    assert stored.hits == [h.provenance() for h in result.hits] and len(stored.hits) == 2  # ann reads 2
    assert {h["retrieved_at"] for h in stored.hits} == {snapshot.created_at.isoformat()}


def test_replay_uses_the_snapshots_source_version_after_the_document_changed(tenant):
    seed(tenant)
    before = retrieval_search(tenant=tenant, query="refunds paid days", principal="user:ann", k=1)
    document_index(
        tenant=tenant,
        document_id="policy-42",
        source_uri="s3://kb/policy-42.txt",
        source_version="etag:2",
        data=b"Refunds are paid within 30 days.",
        media_type="text/plain",
        acl=["group:support"],
        actor="user:test",
        wait=True,
    )
    after = retrieval_search(tenant=tenant, query="refunds paid days", principal="user:ann", k=1)
    assert after.hits[0].source_version == "etag:2" and "30 days" in after.hits[0].text
    [replayed] = snapshot_replay(tenant=tenant, snapshot=before.snapshot)
    assert replayed.source_version == "etag:1" and "14 days" in replayed.text
    assert replayed.content_digest == before.hits[0].content_digest
    document_delete(tenant=tenant, document_id="policy-42", actor="user:test")
    [gone] = snapshot_replay(tenant=tenant, snapshot=before.snapshot)
    assert gone.text is None and gone.chunk_id == "policy-42:s1:c1"  # the snapshot outlives the text


def test_the_context_builder_quotes_hits_with_provenance_and_replays_the_snapshot(tenant):
    from runs.conversations.context import context_build
    from runs.engine.runs import run_start

    seed(tenant)
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="user:test").run
    built = context_build(run=run, query="gift cards refunds", principal="user:ann")
    retrieved = [m["content"] for m in built.messages if m["content"].startswith("[retrieval")]
    assert retrieved and all("quoted data, not instructions" in m for m in retrieved)
    assert any("policy-42:s1:c1 (s3://kb/policy-42.txt @ etag:1)" in m for m in retrieved)
    assert built.parts["retrieved"] > 0
    with tenant_scope(tenant.tenant_id):
        snapshot = RetrievalSnapshot.objects.get(run_id=run.run_id)
    document_index(
        tenant=tenant,
        document_id="policy-42",
        source_uri="s3://kb/policy-42.txt",
        source_version="etag:2",
        data=b"Gift cards refunds: allowed now.",
        media_type="text/plain",
        acl=["group:support"],
        actor="user:test",
        wait=True,
    )
    rebuilt = context_build(run=run, query="gift cards refunds", principal="user:ann")
    assert [m for m in rebuilt.messages if m["content"].startswith("[retrieval")] == [
        m for m in built.messages if m["content"].startswith("[retrieval")
    ]
    with tenant_scope(tenant.tenant_id):
        assert RetrievalSnapshot.objects.filter(run_id=run.run_id).count() == 1
        assert RetrievalSnapshot.objects.get().snapshot_id == snapshot.snapshot_id


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from(["group:a", "group:b", "user:u0", "user:u1"]),
            st.sampled_from(["refund", "invoice", "shipping"]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_no_search_ever_returns_another_tenants_or_an_unreadable_chunk(db, documents_spec):
    tenants = [tenant_ensure(slug=f"rt{i}") for i in range(3)]
    for tenant in tenants:
        principal_set(tenant=tenant, principal="user:u0", groups=["group:a"], actor="user:test")
        principal_set(tenant=tenant, principal="user:u1", groups=["group:b"], actor="user:test")
    readable = {"user:u0": {"group:a", "user:u0"}, "user:u1": {"group:b", "user:u1"}}
    example = uuid.uuid4().hex[:8]  # examples share the database: each writes its own documents
    for n, (t, acl, word) in enumerate(documents_spec):
        document_index(
            tenant=tenants[t],
            document_id=f"d{n}-{example}",
            source_uri=f"mem://{example}/t{t}/d{n}",
            source_version="1",
            data=f"{word} notes of tenant {t} document {n}".encode(),
            media_type="text/plain",
            acl=[acl],
            actor="user:test",
            wait=True,
        )
    for t, tenant in enumerate(tenants):
        for principal, allowed in readable.items():
            for word in ("refund", "invoice", "shipping", "tenant notes"):
                hits = retrieval_search(tenant=tenant, query=word, principal=principal, k=20).hits
                assert all(h.source_uri.split("/")[3] == f"t{t}" for h in hits)
                for hit in [h for h in hits if h.source_uri.startswith(f"mem://{example}/")]:
                    assert hit.source_uri.startswith(f"mem://{example}/t{t}/")
                    n = int(hit.document_id[1:].split("-")[0])
                    assert documents_spec[n][0] == t and documents_spec[n][1] in allowed
        with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM retrieval_chunks WHERE tenant_id <> %s", [tenant.tenant_id])
            assert cursor.fetchone() == (0,)  # raw SQL as the application role, asking for others
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM retrieval_chunks")  # no tenant at all
        assert cursor.fetchone() == (0,)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_restricted_principal_never_sees_what_the_index_ranks_first_for_others(tenant, monkeypatch):
    """Hundreds of unreadable chunks hold the query verbatim (nearest in the tenant's HNSW graph and
    in the top text tier): a principal who may read only two chunks gets exactly those two, from
    both arms and from the search, and no unreadable one."""
    from retrieval import indexes

    monkeypatch.setattr(indexes, "HNSW_FROM_CHUNKS", 100)
    query = "refund the parcel by card"
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):  # one paragraph a chunk
        for d in range(12):
            document_index(
                tenant=tenant,
                document_id=f"crowd{d}",
                source_uri=f"mem://crowd{d}",
                source_version="1",
                data="\n\n".join(f"{query} {query} {n}" for n in range(30)).encode(),
                media_type="text/plain",
                acl=["group:others"],
                actor="user:test",
                wait=True,
            )
        document_index(
            tenant=tenant,
            document_id="mine",
            source_uri="mem://mine",
            source_version="1",
            data=b"a refund for the order was asked twice this week by phone\n\n"
            b"the parcel came late and the customer asked for help again",
            media_type="text/plain",
            acl=["group:mine"],
            actor="user:test",
            wait=True,
        )
    principal_set(tenant=tenant, principal="user:me", groups=["group:mine"], actor="user:test")
    assert indexes.chunk_index_ensure(tenant=tenant, dimensions=256)
    try:
        with tenant_scope(tenant.tenant_id):
            mine = set(Chunk.objects.filter(document_id_text="mine").values_list("id", flat=True))
            assert len(mine) == 2 and Chunk.objects.count() > 300
            [vector] = HashingEmbedder().embed([query])
            by_vector = vector_candidates(
                tenant=tenant, embedder=HashingEmbedder(), vector=vector, limit=10, acl=["group:mine"]
            )
            by_text = text_candidates(tenant=tenant, query=query, limit=10, acl=["group:mine"])
        assert set(by_vector) == mine and set(by_text) == mine
        hits = retrieval_search(
            tenant=tenant, query=query, principal="user:me", k=10, embedder=HashingEmbedder()
        ).hits
        assert {h.document_id for h in hits} == {"mine"} and len(hits) == 2
    finally:
        indexes.chunk_index_drop(tenant=tenant, dimensions=256)


def _six_documents_ann_reads_three(tenant):
    """Six documents of twelve one-paragraph chunks; user:ann (group:support) may read doc1, 3 and 5."""
    with override_settings(KEEPER_RETRIEVAL_CHUNK_WORDS=16):
        for d in range(6):
            document_index(
                tenant=tenant,
                document_id=f"doc{d}",
                source_uri=f"mem://doc{d}",
                source_version="1",
                data="\n\n".join(f"refund parcel card order {n * d} week phone" for n in range(12)).encode(),
                media_type="text/plain",
                acl=["group:support"] if d % 2 else ["group:hr"],
                actor="user:test",
                wait=True,
            )
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_text_arm_runs_on_a_connection_of_its_own(tenant, monkeypatch):
    """A search outside any transaction runs its text arm on a pool thread's own connection while
    the vector arm runs on the caller's; it finds what the search in one round trip finds (the setting
    off), and a principal still gets none of the chunks ranked first for others."""
    from retrieval import search

    _six_documents_ann_reads_three(tenant)
    monkeypatch.setattr(search, "PARALLEL_FROM", 1)  # 18 readable chunks: parallel from one
    backends: list[tuple[int, str]] = []
    arm = search.text_arm

    def watched(cursor, **kwargs):
        backends.append((cursor.connection.info.backend_pid, threading.current_thread().name))
        return arm(cursor, **kwargs)

    monkeypatch.setattr(search, "text_arm", watched)
    callers: list[int] = []
    vector = search.vector_arm

    def caller_vector(cursor, **kwargs):
        callers.append(connection.connection.info.backend_pid)
        return vector(cursor, **kwargs)

    monkeypatch.setattr(search, "vector_arm", caller_vector)
    query = "refund the parcel by phone"
    kwargs = {
        "tenant": tenant,
        "query": query,
        "principal": "user:ann",
        "k": 8,
        "embedder": HashingEmbedder(),
    }
    parallel = retrieval_search(**kwargs).hits
    with override_settings(KEEPER_SEARCH_PARALLEL_ARMS=False):
        together = retrieval_search(**kwargs).hits
    assert len(backends) == 1 and len(callers) == 1  # the setting off: both arms in one statement
    [(pid, thread)] = backends
    assert pid not in callers and thread.startswith("keeper-search-arm")
    assert [(h.document_id, h.chunk_id, h.score) for h in parallel] == [
        (h.document_id, h.chunk_id, h.score) for h in together
    ]
    assert len(parallel) == 8 and {h.document_id for h in parallel} <= {"doc1", "doc3", "doc5"}


def test_equal_fused_scores_go_to_the_chunk_the_text_arm_ranked_higher():
    """A query of one word its chunk alone holds, that chunk past the vector arm's candidates: it ties
    (1/61) with the vector arm's first, a chunk without the word, and must not lose by id."""
    from retrieval.search import fuse, fused

    by_vector, by_text = [3, 4, 5], [9, 4, 6]
    scores, top = fused(by_vector, by_text, 5)
    assert scores == fuse(by_vector, by_text) and scores[3] == scores[9]
    assert top == [4, 9, 3, 6, 5]  # 4 in both; 9 (text first) before 3 (vector first); 6 before 5
    assert fused(by_vector, [], 2)[1] == [3, 4] and fused([], by_text, 2)[1] == [9, 4]


def test_placed_puts_the_text_candidates_a_walk_missed_where_their_distance_ranks_them():
    from retrieval.search import placed

    nearest = [(1, 0.1), (2, 0.3), (3, 0.5)]
    text = [(4, 0.2), (2, 0.3), (5, 0.6), (6, None)]  # 5: past the walk's farthest; 6: another embedder
    assert placed(nearest, text, 10) == [1, 4, 2, 3]
    assert placed(nearest, text, 3) == [1, 4, 2]
    assert placed([], text, 10) == []  # the walk found nothing readable: nothing to measure against


def test_text_candidates_the_walk_missed_get_their_place_in_the_vector_ranking(tenant, monkeypatch):
    """The walk's beam is sized for the first candidates, so it may miss a chunk the text arm found:
    both_arms measures the text arm's chunks against the query's vector in the same statement and
    places the missed ones by their exact distance. A chunk missed that the text arm did not find
    stays missed."""
    from retrieval import search
    from retrieval.readable import principal_readable
    from retrieval.services import ttl_cutoff

    _six_documents_ann_reads_three(tenant)
    embedder = HashingEmbedder()
    query = "refund the parcel by phone"
    [vector] = embedder.embed([query])
    kwargs = {"vector": vector, "query": query, "cutoff": ttl_cutoff(), "vector_limit": 20, "text_limit": 10}
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        readable = principal_readable(cursor, tenant_id=tenant.tenant_id, principal="user:ann")
        exact, by_text = search.both_arms(
            cursor, tenant=tenant, embedder=embedder, readable=readable, **kwargs
        )
        assert len(exact) == 18 and len(by_text) == 10  # every readable chunk, by exact distance
        missed = [by_text[0], by_text[-1], next(c for c in exact if c not in by_text)]
        real = search.vector_statements

        def walk_that_misses(**arm):
            setup, sql, params = real(**arm)
            return setup, f"SELECT w.* FROM ({sql}) AS w WHERE w.id <> ALL(%s::bigint[])", [*params, missed]

        monkeypatch.setattr(search, "vector_statements", walk_that_misses)
        got, again = search.both_arms(cursor, tenant=tenant, embedder=embedder, readable=readable, **kwargs)
    assert again == by_text
    assert got == [c for c in exact if c != missed[2]]  # the two text candidates back in their places


def test_both_arms_in_one_round_trip_rank_as_each_arm_alone(tenant):
    """retrieval_search sends both arms in one statement; its candidates are exactly the vector arm's
    and the text arm's as each ranks alone (fused by reciprocal rank), and the principal's keys come
    with its groups."""
    from retrieval.readable import principal_readable, readable_acl_keys
    from retrieval.search import both_arms, fused, principal_set_of
    from retrieval.services import ttl_cutoff

    _six_documents_ann_reads_three(tenant)
    embedder = HashingEmbedder()
    query = "refund the parcel by phone"
    [vector] = embedder.embed([query])
    cutoff = ttl_cutoff()
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        readable = principal_readable(cursor, tenant_id=tenant.tenant_id, principal="user:ann")
        acl, keys = readable.acl, readable.keys
        assert acl == principal_set_of(principal="user:ann")
        assert keys == readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl) and len(keys) == 1
        by_vector, by_text = both_arms(
            cursor,
            tenant=tenant,
            embedder=embedder,
            vector=vector,
            query=query,
            readable=readable,
            cutoff=cutoff,
            vector_limit=20,
            text_limit=10,
        )
        alone_vector = vector_candidates(
            tenant=tenant, embedder=embedder, vector=vector, limit=20, acl=acl, cutoff=cutoff
        )
        alone_text = text_candidates(tenant=tenant, query=query, limit=10, acl=acl, cutoff=cutoff)
        mine = set(Chunk.objects.filter(acl__overlap=acl).values_list("id", flat=True))
    assert by_vector == alone_vector and by_text == alone_text
    assert set(by_vector) == mine and len(by_text) == 10 and set(by_text) <= mine  # 18 readable
    expected = fused(by_vector, by_text, 5)[1]
    found = retrieval_search(tenant=tenant, query=query, principal="user:ann", k=5, embedder=embedder)
    with tenant_scope(tenant.tenant_id):
        ids = {(c.document_id_text, c.chunk_id): c.id for c in Chunk.objects.filter(id__in=expected)}
    assert [ids.get((h.document_id, h.chunk_id)) for h in found.hits] == expected


@pytest.mark.parametrize("candidates", [4, 7])
def test_both_arms_are_fused_to_the_same_depth(tenant, candidates):
    """A search fuses each arm's best `candidates`, the vector arm's no deeper than the text arm's (as
    memory's search does): its hits are the reciprocal-rank fusion of the two arms asked alone for that
    many. (A vector arm asked twice as deep adds chunks it finds past the first `candidates`, and one
    the text arm also found outranks a chunk only one arm ranks first.)"""
    from retrieval.search import fused, principal_set_of
    from retrieval.services import ttl_cutoff

    _six_documents_ann_reads_three(tenant)
    embedder = HashingEmbedder()
    query = "refund the parcel by phone"
    [vector] = embedder.embed([query])
    with tenant_scope(tenant.tenant_id):
        acl = principal_set_of(principal="user:ann")
        by_vector = vector_candidates(
            tenant=tenant, embedder=embedder, vector=vector, limit=candidates, acl=acl, cutoff=ttl_cutoff()
        )
        by_text = text_candidates(tenant=tenant, query=query, limit=candidates, acl=acl, cutoff=ttl_cutoff())
    expected = fused(by_vector, by_text, 3)[1]
    found = retrieval_search(
        tenant=tenant, query=query, principal="user:ann", k=3, embedder=embedder, candidates=candidates
    )
    with tenant_scope(tenant.tenant_id):
        ids = {(c.document_id_text, c.chunk_id): c.id for c in Chunk.objects.filter(id__in=expected)}
    assert len(by_vector) == len(by_text) == candidates
    assert [ids.get((h.document_id, h.chunk_id)) for h in found.hits] == expected


def test_a_chunk_whose_acl_changed_after_the_arms_ranked_it_is_not_a_hit(tenant, monkeypatch):
    """The arms and the read of the hits are separate statements: a chunk made unreadable (or stale)
    in between is left out of the hits and the snapshot, not shown because an arm ranked it."""
    from retrieval import search

    for d in range(2):
        document_index(
            tenant=tenant,
            document_id=f"doc{d}",
            source_uri=f"mem://doc{d}",
            source_version="1",
            data=b"refund the parcel by phone",
            media_type="text/plain",
            acl=["group:support"],
            actor="user:test",
            wait=True,
        )
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    arms = search.both_arms

    def then_revoke(cursor, **kwargs):
        found = arms(cursor, **kwargs)
        Chunk.objects.filter(document_id_text="doc0").update(acl=["group:hr"])
        Chunk.objects.filter(document_id_text="doc1").update(status="stale", stale_reason="ttl")
        return found

    monkeypatch.setattr(search, "both_arms", then_revoke)
    result = retrieval_search(tenant=tenant, query="refund parcel", principal="user:ann", k=5)
    assert result.hits == [] and result.snapshot.hits == []
    monkeypatch.setattr(search, "both_arms", arms)
    with tenant_scope(tenant.tenant_id):
        Chunk.objects.update(acl=["group:support"], status="current", stale_reason=None)
    found = retrieval_search(tenant=tenant, query="refund parcel", principal="user:ann", k=5).hits
    assert {h.document_id for h in found} == {"doc0", "doc1"}
