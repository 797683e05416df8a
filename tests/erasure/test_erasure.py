"""Erasure reaches every store, leaves only digests, cannot be undone by a replay, and proves it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.tenancy import tenant_scope
from erasure.models import ErasureRequest
from erasure.services import erasure_execute, erasure_request_create
from memory.models import MemoryItem, Tombstone
from memory.services import ClaimErased, memory_purge_expired, memory_remember
from runs.conversations.context import context_build
from runs.conversations.messages import conversation_append
from runs.conversations.sessions import redis_client, session_key, session_window
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, Summary
from tests.conftest import no_tenant
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


@pytest.fixture
def subject_with_everything(tenant):
    """A customer with memory, a conversation, a summary and a Redis window."""
    run = run_start(
        tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="cust-erase"
    ).run
    for i in range(8):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=f"m{i}",
            body={"content": f"My secret address is Baker Street {i}"},
            actor="t",
        )
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="tool_result",
        client_message_id="t1",
        body={"call_id": "c1", "tool": "crm", "content": "Baker Street 221b " * 500},
        actor="t",
    )
    memory_remember(
        tenant=tenant,
        subject_id="cust-erase",
        namespace="profile",
        key="address",
        value="Baker Street 221b",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    memory_remember(
        tenant=tenant,
        subject_id="cust-erase",
        namespace="preference",
        key="language",
        value="english",
        provenance=said(run_id=str(run.run_id), seq=3),
    )
    memory_remember(
        tenant=tenant,
        subject_id="someone-else",
        namespace="preference",
        key="language",
        value="german",
        provenance=said(),
    )
    from runs.conversations.compaction.services import summary_create
    from runs.conversations.compaction.tokens import token_counter

    summary_create(
        run=run,
        events=list(AgentEvent.objects.filter(run=run, seq__lte=5).order_by("seq")),
        counter=token_counter("gpt-4"),
    )
    session_window(run=run)
    return run


def test_erasure_clears_every_store_and_the_receipt_proves_it(tenant, subject_with_everything):
    run = subject_with_everything
    assert redis_client().exists(session_key(run))
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    receipt = done.receipt
    assert done.status == "completed" and receipt["clean"] is True
    assert receipt["counts"]["memory_items"] == 2 and receipt["counts"]["runs.events_redacted"] == 9
    assert receipt["counts"]["runs.artifacts"] == 1
    assert receipt["counts"]["runs.summaries"] == 1 and receipt["counts"]["runs.redis_session_windows"] == 1
    assert set(receipt["final_scan"].values()) == {0}
    assert "cust-erase" not in str(receipt)  # the receipt names the subject by digest only
    with tenant_scope(tenant.tenant_id):
        assert list(MemoryItem.objects.values_list("subject_id", flat=True)) == ["someone-else"]
    assert not AgentEvent.objects.filter(payload__content__icontains="Baker Street").exists()
    assert AgentEvent.objects.filter(run=run, event_type="user_message", payload__redacted=True).count() == 8
    assert not Summary.objects.filter(run=run).exists() and not redis_client().exists(session_key(run))
    # Reading the erased run's conversation afterwards (its session or context page) caches nothing
    # under the subject's pseudonym, a place the next scan for them would find.
    run.refresh_from_db()
    assert run.subject.startswith("erased:") and len(session_window(run=run)) == 9
    assert not redis_client().keys(f"session:{tenant.tenant_id}:{run.subject}:*")


def test_erasure_is_idempotent_and_a_replay_cannot_bring_a_claim_back(tenant, subject_with_everything):
    run = subject_with_everything
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:compliance")
    first = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    again = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert again.status == "completed" and again.receipt == first.receipt  # a second run changes nothing
    assert again.subject_id == "" and again.subject_digest  # done: only the digest is kept
    assert "runs.events_redacted" not in again.progress["memory"]  # each store's own counts
    with pytest.raises(ClaimErased):  # the old event stream replayed: same claim, same source
        memory_remember(
            tenant=tenant,
            subject_id="cust-erase",
            namespace="profile",
            key="address",
            value="Baker Street 221b",
            provenance=said(run_id=str(run.run_id), seq=2),
        )
    with tenant_scope(tenant.tenant_id):
        assert (
            Tombstone.objects.count() == 4 and MemoryItem.objects.filter(subject_id="cust-erase").count() == 0
        )
        assert not Tombstone.objects.filter(digest__icontains="Baker").exists()
    fresh = memory_remember(
        tenant=tenant,
        subject_id="cust-erase",
        namespace="preference",
        key="language",
        value="french",
        provenance=said(run_id="new-run", seq=1),
    )
    assert fresh.value == "french"  # a new statement, given anew, may be kept
    assert context_build(run=run).total > 0  # the redacted history still builds a context


def test_erasure_requests_are_tenant_scoped(tenant, other_tenant):
    request = erasure_request_create(tenant=tenant, subject_id="x", requested_by="user:c")
    with no_tenant():
        assert ErasureRequest.objects.count() == 0  # no tenant set: nothing visible
    with tenant_scope(other_tenant.tenant_id):
        assert not ErasureRequest.objects.filter(pk=request.pk).exists()


def test_expired_claims_are_purged(tenant):
    memory_remember(
        tenant=tenant,
        subject_id="s",
        namespace="profile",
        key="k",
        value="v",
        provenance=said(),
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    memory_remember(tenant=tenant, subject_id="s", namespace="profile", key="j", value="w", provenance=said())
    assert memory_purge_expired() == 1
    with tenant_scope(tenant.tenant_id):
        assert list(MemoryItem.objects.values_list("key", flat=True)) == ["j"]


def _chat(tenant, subject: str, text: str):
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m1",
        body={"content": text},
        actor="t",
    )
    session_window(run=run)
    return run


@pytest.mark.parametrize(
    ("erased", "bystanders"),
    # "-" and "": erasing the subject "-" must not delete the window of every run without a subject
    # (as it would if their keys held "-" in the subject's place).
    [("a*", ["ab", "a"]), ("a", ["a:b", "ab"]), ("[a]", ["a"]), ("-", ["", ""])],
)
def test_erasing_a_subject_never_touches_another_subjects_windows(tenant, erased, bystanders):
    mine = _chat(tenant, erased, "hello")
    others = [_chat(tenant, subject, "hello") for subject in bystanders]
    request = erasure_request_create(tenant=tenant, subject_id=erased, requested_by="user:c")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt["counts"]["runs.redis_session_windows"] == 1
    assert not redis_client().exists(session_key(mine))
    assert all(redis_client().exists(session_key(run)) for run in others)


def test_another_customer_saying_the_same_word_does_not_fail_the_erasure(tenant, subject_with_everything):
    _chat(tenant, "someone-else", "Please answer in English, and ship to Baker Street 221b too")
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:c")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["final_scan"]["agent_events.payload"] == 0


def test_a_stored_result_another_subject_also_points_to_is_kept(tenant, subject_with_everything, settings):
    shared = "Baker Street 221b " * 500  # the same text: the same content-addressed file
    other = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="other").run
    conversation_append(
        tenant=tenant,
        run_id=other.run_id,
        event_type="tool_result",
        client_message_id="t1",
        body={"call_id": "c1", "tool": "crm", "content": shared},
        actor="t",
    )
    [ref] = [e.payload["content_ref"] for e in AgentEvent.objects.filter(run=other, event_type="tool_result")]
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:c")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["counts"]["runs.artifacts"] == 0
    from core.artifacts import artifact_get

    assert artifact_get(tenant_id=tenant.tenant_id, ref=ref).decode().startswith("Baker Street")  # intact


def test_a_claim_without_a_run_leaves_no_tombstone_that_refuses_every_later_one(tenant):
    operator = said(source_type="operator", validation_method="operator_entered", run_id=None, seq=None)
    memory_remember(
        tenant=tenant,
        subject_id="cust-anew",
        namespace="profile",
        key="city",
        value="Oslo",
        provenance=operator,
    )
    request = erasure_request_create(tenant=tenant, subject_id="cust-anew", requested_by="user:compliance")
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    with pytest.raises(ClaimErased):  # the erased claim itself stays refused
        memory_remember(
            tenant=tenant,
            subject_id="cust-anew",
            namespace="profile",
            key="city",
            value="Oslo",
            provenance=operator,
        )
    kept = memory_remember(  # another claim, entered anew, is not "the same source" as the erased one
        tenant=tenant,
        subject_id="cust-anew",
        namespace="profile",
        key="phone",
        value="+47 1",
        provenance=operator,
    )
    assert kept.value == "+47 1"


def test_what_stands_in_for_an_erased_subject_cannot_be_recomputed_without_the_key(
    tenant, subject_with_everything, settings
):
    """Receipts, tombstones and erased runs name the subject by keyed digests (KEEPER_DIGEST_KEY): one
    who reads the database and guesses the id cannot confirm the guess with a plain hash."""
    from core.digests import json_digest, subject_digest
    from runs.kernel.models import AgentRun

    run = subject_with_everything
    request = erasure_request_create(tenant=tenant, subject_id="cust-erase", requested_by="user:compliance")
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    guessed = {"tenant": str(tenant.tenant_id), "subject": "cust-erase"}
    with tenant_scope(tenant.tenant_id):
        request = ErasureRequest.objects.get(request_id=request.request_id)
        stored = AgentRun.objects.get(run_id=run.run_id).subject
        tombstones = list(Tombstone.objects.values_list("digest", "subject_digest"))
    assert request.subject_digest.startswith("hmac-sha256:") and request.subject_digest != json_digest(
        guessed
    )
    assert stored == f"erased:{request.subject_digest}"
    assert tombstones and all(d.startswith("hmac-sha256:") for pair in tombstones for d in pair)
    settings.KEEPER_DIGEST_KEY = "another-key"  # with another key the same subject digests differently
    assert subject_digest(tenant_id=tenant.tenant_id, subject_id="cust-erase") != request.subject_digest


def test_a_tombstone_laid_before_digests_were_keyed_still_refuses_the_claim(tenant):
    """Older erasures left unkeyed sha256 digests; the check tries them too, so an erased claim cannot
    come back because the digests changed form."""
    from core.digests import json_digest

    value = {"subject": "cust-old", "namespace": "profile", "key": "address", "value": "Elm Street 1"}
    with tenant_scope(tenant.tenant_id):
        old = ErasureRequest.objects.create(
            tenant=tenant, subject_id="", requested_by="user:compliance", subject_digest="sha256:x"
        )
        Tombstone.objects.create(
            tenant=tenant, kind="claim", digest=json_digest(value), subject_digest="sha256:x", request=old
        )
    with pytest.raises(ClaimErased):
        memory_remember(
            tenant=tenant,
            subject_id="cust-old",
            namespace="profile",
            key="address",
            value="Elm Street 1",
            provenance=said(),
        )


@pytest.mark.django_db(transaction=True)
def test_asking_to_erase_a_subject_again_while_a_request_is_open_answers_that_request(tenant):
    """Six clicks on erase, at once, make one request, not six. While one is pending or
    running, asking again (even at the same moment) answers it, and sends it to a worker again."""
    import threading

    from django.db import connection

    from erasure.models import ErasureRequest
    from erasure.services import erasure_request_create

    barrier = threading.Barrier(6)
    made: list[str] = []

    def ask() -> None:
        barrier.wait()
        try:
            made.append(
                str(
                    erasure_request_create(
                        tenant=tenant, subject_id="cust-twice-9", requested_by="user:c"
                    ).request_id
                )
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 6 and len(set(made)) == 1
    from core.tenancy import tenant_scope

    with tenant_scope(tenant.tenant_id):
        assert ErasureRequest.objects.count() == 1


def test_erasure_has_redis_write_its_snapshot_again(tenant, subject_with_everything):
    """After a clean receipt, Redis's snapshot on disk must not still hold the erased subject's
    message (the live keys gone, the dump is written again only on Redis's schedule)."""
    import time
    from pathlib import Path

    client = redis_client()
    key = session_key(subject_with_everything).encode()  # its window: the subject's messages
    if not client.config_get("save").get("save"):
        pytest.skip("this Redis keeps no snapshot")
    dump = Path(client.config_get("dir")["dir"]) / client.config_get("dbfilename")["dbfilename"]
    compression = client.config_get("rdbcompression")["rdbcompression"]
    client.config_set("rdbcompression", "no")  # the text readable in the file, as it was compressed or not
    try:
        client.save()
        assert key in dump.read_bytes()
        before = client.lastsave()
        time.sleep(1.1)  # LASTSAVE counts seconds
        request = erasure_request_create(
            tenant=tenant, subject_id="cust-erase", requested_by="user:compliance"
        )
        receipt = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id).receipt
        assert receipt["counts"]["runs.redis_snapshots_rewritten"] == 1
        deadline = time.monotonic() + 20
        while client.lastsave() == before or client.info("persistence")["rdb_bgsave_in_progress"]:
            assert time.monotonic() < deadline, "Redis did not write its snapshot"
            time.sleep(0.1)
        assert key not in dump.read_bytes()
    finally:
        client.config_set("rdbcompression", compression)


def test_keepers_own_approval_notes_are_not_searched_as_the_subjects_texts(tenant):
    """The request's searched texts leave out Keeper's own note ("closed: the subject of the run was
    erased") and a policy's, the same sentences in every tenant's runs. A person's
    note on the subject's approval is still theirs to search."""
    from core.digests import json_digest, subject_digest
    from erasure.erasers.runs import RunsEraser
    from runs.kernel.models import Approval

    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t", subject="cust-n"
    ).run
    notes = {
        "keeper": "closed: the subject of the run was erased, so nobody decides it",
        "policy:auto_approve_below_limit": "approved by policy below the limit of the tenant",
        "user:sam": "the customer Nadia Quist called twice about order 77-19",
    }
    with tenant_scope(tenant.tenant_id):
        for decided_by, note in notes.items():
            Approval.objects.create(
                tenant=tenant,
                run=run,
                step_id="approve",
                request={},
                request_digest=json_digest(note),
                status="expired",
                decided_by=decided_by,
                note=note,
                expires_at=timezone.now(),
                decided_at=timezone.now(),
            )
    digest = subject_digest(tenant_id=tenant.tenant_id, subject_id="cust-n")
    values = (
        RunsEraser().collect(tenant_id=tenant.tenant_id, subject_id="cust-n", subject_digest=digest).values
    )
    assert notes["user:sam"] in values
    assert notes["keeper"] not in values and notes["policy:auto_approve_below_limit"] not in values


def test_a_run_key_used_again_after_an_erasure_is_erased_again(tenant):
    """An idempotency key holding the subject's id becomes an erased key; a run started with the same
    key after the erasure is erased too, where one erased key per id would be taken already and every
    retry would fail on the key's uniqueness."""
    erased_keys = []
    for _ in range(2):
        started = run_start(
            tenant=tenant,
            workflow_name="demo.countdown",
            input={"n": 1},
            actor="test",
            subject="cust-ik-7",
            idempotency_key="order-for-cust-ik-7",
        )
        assert started.created  # the first run's key was erased: the same key starts a new run
        request = erasure_request_create(
            tenant=tenant, subject_id="cust-ik-7", requested_by="user:compliance"
        )
        done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
        assert done.status == "completed" and done.receipt is not None and done.receipt["clean"] is True
        started.run.refresh_from_db()
        erased_keys.append(started.run.idempotency_key)
    assert all(k.startswith("erased:") and "cust-ik-7" not in k for k in erased_keys)
    assert len(set(erased_keys)) == 2
