"""A subject's text in every place Keeper keeps it; after erasure, raw SQL over every registered column,
Redis and the artifact store finds no copy, the receipt counts each place before and after, history
still verifies and replays, and an unfinished run is refused with `subject_erased`."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from console.models import AuditEntry
from core.api_auth import api_key_create
from core.erasure import eraser_register, eraser_unregister, registered_columns
from core.tenancy import tenant_scope
from memory.erasure import erasure_execute, erasure_request_create
from memory.models import ErasureRequest
from memory.services import memory_remember
from runs.conversations.compaction.services import summary_create
from runs.conversations.compaction.tokens import token_counter
from runs.conversations.messages import conversation_append
from runs.conversations.sessions import redis_client, session_window
from runs.engine.approvals import approval_approve
from runs.engine.forks import run_fork
from runs.engine.operations import operation_reconcile
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import SubjectErased
from runs.kernel.models import AgentEvent, AgentRun, Approval
from runs.kernel.state import EncodedState
from runs.operator.history import history_verify, run_history_document
from runs.operator.replay import history_export, replay_history
from tests.artifacts import blob_stored
from tests.console.conftest import make_user
from tests.memory.test_memory import said
from tests.processes import wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox, _drive
from tests.runs.workflows.test_refund_workflow import sandbox as sandbox  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECT = "cust-7f3a9e"
REASON = "Soaked parcel left at 17 Quince Lane"
MESSAGE = "Please call me back on 0170 555 0199"
RESUME_NOTE = "Ada Quince phoned again from 0170 555 0199"
FORK_NOTE = "retry for Ada Quince of Quince Lane"
APPROVAL_NOTE = "approved: Ada Quince is a regular at 17 Quince Lane"
RECONCILE_NOTE = "PSP shows the refund to Ada Quince"
TOOL_RESULT = "CRM record: Ada Quince, 17 Quince Lane, born 1984. " * 200
MEMORY_VALUE = "17 Quince Lane"
TEXTS = (
    REASON,
    MESSAGE,
    RESUME_NOTE,
    FORK_NOTE,
    APPROVAL_NOTE,
    RECONCILE_NOTE,
    MEMORY_VALUE,
    "Ada Quince",
    SUBJECT,
)
BYSTANDER = "Other customer at 99 Birch Avenue"


def _refund(tenant, sandbox: Sandbox, settings) -> AgentRun:
    """A finished refund of the subject: its reason in state, an approval with a note, and an operation
    reconciled by a person whose note names the customer."""
    settings.KEEPER_REFUND_AUTO_APPROVE_MINOR = 0
    sandbox.order("o-301")
    sandbox.fault("drop_after_apply", order_id="o-301", remaining=1)
    sandbox.fault("lookup_non_authoritative")
    run = run_start(
        tenant=tenant,
        workflow_name="refund",
        input={"order_id": "o-301", "reason": REASON},
        actor="test",
        subject=SUBJECT,
        idempotency_key=f"refund-{SUBJECT}-1",
    ).run
    run = _drive(run)
    assert run.suspend_reason == "approval_required"
    approval_approve(
        approval_id=Approval.objects.get(run=run, status="pending").approval_id,
        actor="user:sam",
        note=APPROVAL_NOTE,
    )
    run = _drive(run)
    assert run.suspend_reason == "reconciliation_required", run.suspend_detail
    [refund] = sandbox.ledger("o-301")
    operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-301",
        actor="user:ana",
        note=RECONCILE_NOTE,
        outcome="applied",
        external_ref=refund["refund_id"],
    )
    run = _drive(run)
    assert run.status == "completed", run.suspend_detail
    return run


def _conversation(tenant) -> AgentRun:
    """An unfinished conversation: messages (ids built from the subject id), a stored tool result, a
    summary, a Redis window, memory, a resume note, and a fork with a note."""
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=SUBJECT).run
    for i in range(4):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=f"{SUBJECT}-m{i}",
            body={"content": f"{MESSAGE} ({i})"},
            actor="t",
        )
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="tool_result",
        client_message_id="t1",
        body={"call_id": "c1", "tool": "crm", "content": TOOL_RESULT},
        actor="t",
    )
    memory_remember(
        tenant=tenant,
        subject_id=SUBJECT,
        namespace="profile",
        key="address",
        value=MEMORY_VALUE,
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    summary_create(
        run=run,
        events=list(AgentEvent.objects.filter(run=run, seq__lte=4).order_by("seq")),
        counter=token_counter("gpt-4"),
    )
    session_window(run=run)
    run_fork(run_id=run.run_id, at_seq=3, actor="user:eve", start=False, note=FORK_NOTE)
    run_suspend(run_id=run.run_id, actor="user:eve", reason="paused", detail="checking")
    run_resume(run_id=run.run_id, actor="user:eve", note=RESUME_NOTE)
    return AgentRun.objects.get(run_id=run.run_id)


def _bystander(tenant) -> AgentRun:
    run = run_start(
        tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="someone-else"
    ).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="b1",
        body={"content": BYSTANDER},
        actor="t",
    )
    return run


def _copies(text: str, tenant) -> dict[str, int]:
    """Raw SQL over every registered column (in the tenant, as row-level security requires): rows whose
    text holds this string."""
    found = {}
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        for table, column in sorted(registered_columns()):
            cursor.execute(f"SELECT count(*) FROM {table} WHERE {column}::text ILIKE %s", [f"%{text}%"])  # noqa: S608
            if n := cursor.fetchone()[0]:
                found[f"{table}.{column}"] = n
    return found


def _decoded(value: bytes | str) -> str:
    assert isinstance(value, bytes)  # the client does not decode responses
    return value.decode()


def _redis_copies(text: str) -> int:
    client = redis_client()
    hits = 0
    for key in client.scan_iter(match="session:*"):
        blob = _decoded(key) + " ".join(_decoded(v) for v in client.lrange(key, 0, -1))
        hits += text.lower() in blob.lower()
    return hits


def _erase(tenant) -> ErasureRequest:
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    return erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)


def test_erasure_reaches_every_copy_and_the_receipt_counts_each_place(tenant, sandbox, settings):  # noqa: F811
    refund, chat = _refund(tenant, sandbox, settings), _conversation(tenant)
    bystander = _bystander(tenant)
    [fork] = AgentRun.objects.filter(parent_run=chat)
    artifact = AgentEvent.objects.get(run=chat, event_type="tool_result").payload["content_ref"]
    assert blob_stored(tenant.tenant_id, artifact) and _redis_copies(MESSAGE) == 1
    for text in TEXTS:  # the scenario really put every text somewhere
        assert _copies(text, tenant), text
    before = _copies(SUBJECT, tenant)
    assert {
        "agent_runs.subject",
        "agent_runs.idempotency_key",
        "agent_events.client_message_id",
        "memory_items.subject_id",
    } <= set(before)
    # A worker read the run before the erasure: it must never commit the unredacted state back.
    grant = apply(
        m.LeaseTaken(
            run_id=chat.run_id,
            owner="w-stale",
            ttl=60,
        )
    )
    assert grant is not None and grant.status == "suspended"

    done = _erase(tenant)

    receipt = done.receipt
    assert done.status == "completed" and receipt["clean"] is True, receipt["final_scan"]
    places = {p["place"]: p for p in receipt["places"]}
    for name in (
        "agent_runs.state",
        "agent_runs.subject",
        "agent_runs.idempotency_key",
        "agent_events.payload",
        "agent_events.state",
        "agent_events.client_message_id",
        "approvals.reasons",
        "approvals.note",
        "tool_operations.history",
        "summaries.text",
        "memory_items.value",
        "redis.session_windows",
        "artifacts.stored",
    ):
        assert places[name]["before"] > 0 and places[name]["after"] == 0, places[name]
    assert all(p["after"] == 0 for p in places.values())
    assert "VACUUM" in receipt["remanence"] and SUBJECT not in str(receipt)
    for text in TEXTS:  # raw SQL over every registered column, Redis and the file store
        assert _copies(text, tenant) == {}, text
        assert _redis_copies(text) == 0, text
    assert not blob_stored(tenant.tenant_id, artifact)
    assert _copies(BYSTANDER, tenant) == {"agent_events.payload": 1}  # another customer's words stay
    assert AgentRun.objects.get(run_id=bystander.run_id).subject == "someone-else"

    held = m.Held(chat.run_id, grant.owner, grant.epoch, grant.revision, 1)
    committed = apply(
        m.StepCommitted(held, EncodedState("{}", "sha256:x"), grant.next_step, grant.next_step, {})
    )
    assert committed is None  # fenced: the stale worker writes nothing

    for run in (chat, fork):  # unfinished: suspended, and a plain resume is refused with the reason
        run.refresh_from_db()
        assert (run.status, run.suspend_reason) == ("suspended", "subject_erased")
        assert run.resume_requested_at is None and run.subject.startswith("erased:hmac-sha256:")
        with pytest.raises(SubjectErased) as refused:
            run_resume(run_id=run.run_id, actor="user:eve", note="try again")
        assert refused.value.code == "subject_erased" and "erased" in refused.value.message
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='t', scope='write').plaintext}"
    )
    answer = api.post(f"/api/v1/runs/{chat.run_id}/resume", {"note": "again"}, format="json")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "subject_erased", answer.content
    pending = Approval.objects.create(
        tenant=tenant,
        run=chat,
        step_id="respond",
        request={},
        request_digest="d",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    with pytest.raises(SubjectErased):  # an approval cannot wake it either
        approval_approve(approval_id=pending.approval_id, actor="user:sam")
    chat.refresh_from_db()
    assert chat.resume_requested_at is None and Approval.objects.get(pk=pending.pk).status == "pending"
    with pytest.raises(SubjectErased):  # a fork would continue the erased conversation
        run_fork(run_id=chat.run_id, at_seq=3, actor="user:eve", start=False)
    with pytest.raises(SubjectErased):
        conversation_append(
            tenant=tenant,
            run_id=chat.run_id,
            event_type="user_message",
            client_message_id="n1",
            body={"content": "hello again"},
            actor="t",
        )

    refund.refresh_from_db()
    assert refund.status == "completed" and refund.subject.startswith("erased:")
    for run in (refund, chat, fork):  # history still verifies (export) and replays
        history_verify(run_history_document(run_id=run.run_id))
        assert (
            replay_history(
                workflow_name=run.workflow_name,
                workflow_version=run.workflow_version,
                events=history_export(run_id=run.run_id),
            )
            == []
        )
    erased_event = AgentEvent.objects.get(run=refund, event_type="subject_erased")
    assert erased_event.payload["redactions"] and erased_event.state_digest == refund.state_digest

    engineer = make_user("eng", "engineer", tenants=(tenant,))
    client = Client()
    client.force_login(engineer)
    page = client.get(f"/runs/{refund.run_id}/")
    assert page.status_code == 200 and b"Subject erased" in page.content
    assert b"Quince" not in page.content and SUBJECT.encode() not in page.content
    state_page = client.get(f"/runs/{refund.run_id}/state/?rev=2").content.decode()
    assert "erased: the subject" in state_page and "Quince" not in state_page
    diff_page = client.get(f"/runs/{refund.run_id}/diff/?a=2&b=3").content.decode()
    assert "redacted by an erasure" in diff_page and "does not match" not in diff_page
    client.force_login(make_user("comp", "compliance", tenants=(tenant,)))
    shown = client.get(f"/compliance/{tenant.slug}/erasures/{done.request_id}/").content.decode()
    assert "Every place, before and after" in shown and "VACUUM" in shown
    assert "<code>agent_events.state</code>" in shown and SUBJECT not in shown

    again = _erase(tenant)  # a second request for the same subject: nothing left, still clean
    assert again.receipt["clean"] and all(
        p["before"] == 0 for p in again.receipt["places"] if p["place"] != "erasure_requests.subject_id"
    )
    # The runs marked erased:<digest> are still found as the subject's (a retry after a crash finishes
    # them) and a second pass writes nothing to them.
    assert again.receipt["searched"]["runs"] == 3
    assert AgentEvent.objects.filter(run__in=[refund, chat, fork], event_type="subject_erased").count() == 3


def test_an_edited_redacted_event_breaks_the_history_check(tenant):
    chat = _conversation(tenant)
    _erase(tenant)
    document = run_history_document(run_id=chat.run_id)
    history_verify(document)
    event = next(e for e in document["events"] if e["event_type"] == "run_started")
    event["state"] = {**(event["state"] or {}), "smuggled": "back"}
    from runs.operator.history import HistoryImportError, history_digest

    document["digest"] = history_digest(document)
    with pytest.raises(HistoryImportError, match="state does not match"):
        history_verify(document)


def test_a_place_the_erasers_missed_makes_the_receipt_not_clean(tenant):
    chat = _conversation(tenant)
    AuditEntry.objects.create(
        actor="user:eve",
        tenant=tenant,
        action="resume",
        target_type="run",
        target_id=str(chat.run_id),
        details={"customer": SUBJECT},  # details are never rewritten: the scan must find this
    )

    class LateWriter:
        """Writes the subject's text back into a run after the runs eraser (registered last)."""

        name = "zz_late_writer"

        def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Any:
            from core.erasure import Scope

            return Scope(tenant_id=tenant_id, subject_id=subject_id)

        def erase(self, *, scope: Any, request_id: UUID, subject_digest: str) -> dict[str, int]:
            with tenant_scope(scope.tenant_id):
                return {
                    "written": AgentRun.objects.filter(run_id=chat.run_id).update(
                        suspend_detail=f"{MESSAGE} (0)"
                    )
                }

    eraser_register(LateWriter())
    try:
        done = _erase(tenant)
    finally:
        eraser_unregister("zz_late_writer")
    places = {p["place"]: p for p in done.receipt["places"]}
    assert done.status == "failed" and done.receipt["clean"] is False
    assert places["console_audit_log.details"]["after"] == 1  # append-only: found and shown, never hidden
    assert (
        places["agent_runs.suspend_detail"]["after"] == 1
    )  # the scan reads the place, not the eraser's word
    assert done.subject_id == SUBJECT and "console_audit_log.details" in done.error


@pytest.mark.slow
def test_a_worker_mid_step_during_erasure_cannot_write_the_subject_back(tenant, processes):
    processes.worker()
    run = run_start(
        tenant=tenant,
        workflow_name="test.slow",
        input={"sleep_s": 3, "reason": REASON},
        actor="t",
        subject=SUBJECT,
    ).run
    wait_until(
        lambda: AgentRun.objects.filter(
            run_id=run.run_id, next_step="slow", lease_owner__isnull=False
        ).exists(),
        timeout=30,
        message="the worker to enter the slow step",
    )
    done = _erase(tenant)  # while the worker sleeps in the step, holding the unredacted state
    assert done.receipt["clean"], done.receipt["final_scan"]
    erased_at = AgentEvent.objects.get(run=run, event_type="subject_erased").seq
    time.sleep(5)  # the step ends and the worker tries to commit what it read
    run.refresh_from_db()
    assert (run.status, run.suspend_reason, run.state_revision) == ("suspended", "subject_erased", erased_at)
    assert _copies(REASON, tenant) == {} and run.state["reason"] == "[erased]"
    assert "was lost" in processes.logs(), processes.logs()[-2000:]  # the worker saw its lease end


def test_short_values_are_erased_as_whole_words():
    from runs.conversations.erasure import Redactor

    redact = Redactor("cust-7f3a9e", ("english", "Baker Street 221b", "Ada", "王芳"))
    assert redact(
        {
            "lang": "English",
            "said": "I speak English",
            "status": "englishman",
            "note": "to baker street 221B now",
            "to": "call ADA back",
            "other": "Adam, Adaline",
            "zh": "客户王芳要求退款",
            "mixed": "客户Ada要求退款",
        }
    ) == {
        "lang": "[erased]",
        "said": "[erased]",
        "status": "englishman",
        "note": "[erased]",
        "to": "[erased]",
        "other": "Adam, Adaline",
        "zh": "[erased]",
        "mixed": "[erased]",
    }
    assert redact({"client_message_id": "cust-7f3a9e-m1"})["client_message_id"].startswith("erased:")


@pytest.mark.parametrize("name", ["王芳", "Ada", "Яна"])
def test_a_short_name_kept_in_memory_is_erased_from_the_subjects_runs(tenant, name):
    """A two-character Chinese name or a three-letter one is the person's data: where the subject's
    runs hold it, as a value or as a word of a sentence, erasure redacts it and the scan counts it."""
    subject = f"cust-short-{len(name)}-{ord(name[0])}"
    said_in = {"customer_name": name, "line": f"客户{name}要求退款", "todo": f"call {name} back"}
    run = run_start(
        tenant=tenant, workflow_name="conversation", input=dict(said_in), actor="t", subject=subject
    ).run
    other = run_start(
        tenant=tenant,
        workflow_name="conversation",
        input={"todo": f"call {name} back", "name": f"{name}m"},
        actor="t",
        subject="someone-else",
    ).run
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="profile",
        key="name",
        value=name,
        provenance=said(run_id=str(run.run_id), seq=1),
    )
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"], done.error
    before = {p["place"]: p["before"] for p in done.receipt["places"]}
    assert before["agent_runs.state"] == 1 and before["agent_events.state"] >= 1
    with tenant_scope(tenant.tenant_id):
        state = AgentRun.objects.get(run_id=run.run_id).state
        assert {k: state[k] for k in said_in} == dict.fromkeys(said_in, "[erased]")
        assert not [e.seq for e in AgentEvent.objects.filter(run=run) if name in str((e.payload, e.state))]
        # Another subject's run keeps it: a short value is searched in the subject's own runs only.
        assert AgentRun.objects.get(run_id=other.run_id).state["todo"] == f"call {name} back"


def _subject_with_data(tenant, subject: str) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id=f"{subject}:m1",
        body={"content": f"I am {subject}, please call me back"},
        actor="t",
    )
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="profile",
        key="customer_id",
        value=f"crm record {subject}",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    return run


def test_a_subject_whose_id_begins_another_subjects_id_is_erased_without_touching_the_other(tenant):
    """Erasing "cust-yy-100" must neither count nor touch "cust-yy-1000": ids are whole tokens."""
    _subject_with_data(tenant, "cust-yy-100")
    other = _subject_with_data(tenant, "cust-yy-1000")
    request = erasure_request_create(tenant=tenant, subject_id="cust-yy-100", requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"], done.error
    assert done.receipt["counts"]["memory_items"] == 1
    with tenant_scope(tenant.tenant_id):
        other = AgentRun.objects.get(run_id=other.run_id)
        assert other.subject == "cust-yy-1000"
        assert AgentEvent.objects.get(run=other, seq=2).client_message_id == "cust-yy-1000:m1"
        assert "cust-yy-1000" in AgentEvent.objects.get(run=other, seq=2).payload["content"]
    from memory.models import MemoryItem

    with tenant_scope(tenant.tenant_id):
        assert MemoryItem.objects.filter(subject_id="cust-yy-1000").count() == 1
        assert not MemoryItem.objects.filter(subject_id="cust-yy-100").exists()


def test_the_subject_id_is_matched_as_a_whole_token():
    from runs.conversations.erasure import Redactor

    redact = Redactor("cust-yy-100", ())
    assert redact(
        {"a": "cust-yy-1000", "b": "cust-yy-100:m1", "c": "x cust-yy-100.", "d": "CUST-YY-100"}
    ) == {
        "a": "cust-yy-1000",
        "b": "[erased]",
        "c": "[erased]",
        "d": "[erased]",
    }


def test_erasure_keeps_the_codes_of_a_runs_history(tenant):
    """Why a run stopped ("awaiting_input") is a code, not the subject's text: it stays."""
    from runs.engine.steps import run_advance

    run = _subject_with_data(tenant, "cust-codes-42")
    for _ in range(5):  # the worker's steps, in this process: answer, then wait for the customer
        run_advance(run_id=run.run_id)
    with tenant_scope(tenant.tenant_id):
        reasons = [e.payload["reason"] for e in AgentEvent.objects.filter(run=run, payload__has_key="reason")]
    assert "awaiting_input" in reasons
    request = erasure_request_create(tenant=tenant, subject_id="cust-codes-42", requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt["clean"], done.error
    with tenant_scope(tenant.tenant_id):
        after = [e.payload["reason"] for e in AgentEvent.objects.filter(run=run, payload__has_key="reason")]
        content = AgentEvent.objects.get(run=run, seq=2).payload
    # The erasure stopped the run first: one more code, its own.
    assert after == [*reasons, "subject_erased"] and "[erased]" not in after
    assert "content" not in content and content.get("redacted")


def test_a_staff_note_about_the_subject_is_blanked_and_the_audit_entry_stays(tenant):
    """A support note on the subject's run is the subject's data: erasure blanks it (the trigger allows
    exactly that), the entry stays as evidence, and the log still refuses every other change."""
    from django.db import DatabaseError, transaction

    run = _subject_with_data(tenant, "cust-ww-5150")
    note = "checked with customer Zorro 5150 lives at Elm Road 77"
    on_run = AuditEntry.objects.create(
        actor="user:ana",
        tenant=tenant,
        action="approve",
        target_type="run",
        target_id=str(run.run_id),
        note=note,
    )
    elsewhere = AuditEntry.objects.create(
        actor="user:ana",
        tenant=tenant,
        action="note",
        target_type="user",
        target_id="7",
        note="called cust-ww-5150",
    )
    bystander = AuditEntry.objects.create(
        actor="user:ana", tenant=tenant, action="resume", target_type="run", target_id="x", note="looked fine"
    )
    request = erasure_request_create(tenant=tenant, subject_id="cust-ww-5150", requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"], done.error
    assert done.receipt["counts"]["console.audit_notes_erased"] == 2
    for entry in (on_run, elsewhere):
        entry.refresh_from_db()
        assert entry.note == "[erased]" and entry.details["note_erased_by"] == str(request.request_id)
        assert entry.action in ("approve", "note") and entry.actor == "user:ana"
    bystander.refresh_from_db()
    assert bystander.note == "looked fine"
    for change in ({"note": "rewritten"}, {"note": "[erased]", "action": "other"}):
        with pytest.raises(DatabaseError), transaction.atomic():
            AuditEntry.objects.filter(pk=bystander.pk).update(**change)
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.filter(pk=bystander.pk).delete()


def test_erasure_blanks_no_other_customers_note_and_keeps_the_codes_of_an_episode(tenant):
    """The erased subject's memory holds an episode ({"workflow": "conversation", ...}) and a short
    name: another customer's notes that use the same word or name stay as written, a note on the
    subject's run or naming their id is blanked, and the subject's runs keep their workflow's name."""
    subject = "cust-zoe-31"
    run = _subject_with_data(tenant, subject)
    other = _subject_with_data(tenant, "cust-ada-32")
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="episodes",
        key="last_conversation",
        value={"workflow": "conversation", "outcome": "answered", "summary": "asked where the parcel is"},
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="profile",
        key="name",
        value="Ada",
        provenance=said(run_id=str(run.run_id), seq=2),
    )

    def note(target: str, text: str) -> AuditEntry:
        return AuditEntry.objects.create(
            actor="user:ana", tenant=tenant, action="cancel", target_type="run", target_id=target, note=text
        )

    kept = [
        note(str(other.run_id), "conversation closed by the agent, customer happy"),
        note(str(other.run_id), "the other Ada asked to close this"),
        note("x", "customer says it was delivered broken"),
    ]
    blanked = [note(str(run.run_id), "closed, Ada agreed"), note("y", f"merged into {subject}")]
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"], done.error
    assert [AuditEntry.objects.get(pk=e.pk).note for e in kept] == [e.note for e in kept]
    assert [AuditEntry.objects.get(pk=e.pk).note for e in blanked] == ["[erased]", "[erased]"]
    with tenant_scope(tenant.tenant_id):
        started = AgentEvent.objects.get(run=run, seq=1).payload
    assert "conversation" in json.dumps(started)  # the workflow's name is no one's text


def test_a_name_used_as_a_key_is_erased_and_a_short_code_in_memory_is_left_alone(tenant):
    """{"Zofia": "sister"}: a key can be the subject's data, and is redacted like a value (the scan
    reads keys too; the receipt failed). A memory value "ok" is an answer, not a name: the run's
    {"status": "ok"} and the system's {"ok": true} checks keep it."""
    subject = "cust-key-05"
    run = run_start(
        tenant=tenant,
        workflow_name="conversation",
        input={
            "contacts": {"Zofia": "sister", "delivered_at": "2026-11-02"},
            "status": "ok",
            "check": {"ok": True},
        },
        actor="t",
        subject=subject,
    ).run
    for value, key in (("Zofia", "name"), ("ok", "last_answer")):
        memory_remember(
            tenant=tenant,
            subject_id=subject,
            namespace="profile",
            key=key,
            value=value,
            provenance=said(run_id=str(run.run_id), seq=1),
        )
    done = _erase_subject(tenant, subject)
    assert done.status == "completed" and done.receipt["clean"], done.error
    with tenant_scope(tenant.tenant_id):
        state = AgentRun.objects.get(run_id=run.run_id).state
    assert state["contacts"] == {"[erased]": "sister", "delivered_at": "2026-11-02"}
    assert (state["status"], state["check"]) == ("ok", {"ok": True})


def test_a_failed_erasure_keeps_the_memory_a_retry_searches_for(tenant):
    """A copy no eraser removes (a company document naming the subject's id) fails the receipt. The
    subject's memory stays until nothing else holds their data, so the retry, once the document is
    deleted, still knows what to look for, and only then is clean."""
    from retrieval.services import document_delete

    subject = "cust-retry-77"
    run = _subject_with_data(tenant, subject)
    _document_naming(tenant, "case-notes", subject)
    first = _erase_subject(tenant, subject)
    assert first.status == "failed" and not first.receipt["clean"]
    assert first.receipt["final_scan"]["retrieval_chunks.text"] == 1
    from memory.models import MemoryItem

    with tenant_scope(tenant.tenant_id):
        assert MemoryItem.objects.filter(subject_id=subject).count() == 1  # kept for the retry
        assert "[erased]" in json.dumps(AgentEvent.objects.get(run=run, seq=2).payload) or (
            AgentEvent.objects.get(run=run, seq=2).payload.get("redacted")
        )
    document_delete(tenant=tenant, document_id="case-notes", actor="user:test")
    again = erasure_execute(tenant_id=tenant.tenant_id, request_id=first.request_id)
    assert again.status == "completed" and again.receipt["clean"], again.error
    assert again.receipt["counts"]["memory_items"] == 1
    with tenant_scope(tenant.tenant_id):
        assert not MemoryItem.objects.filter(subject_id=subject).exists()


def _said_and_copied(tenant, subject: str, text: str, copy: str) -> AgentRun:
    """The subject says `text` in their conversation, and a run of no one holds `copy` (returned)."""
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m1",
        body={"content": text},
        actor="t",
    )
    return run_start(tenant=tenant, workflow_name="conversation", input={"copy": copy}, actor="t").run


def _document_naming(tenant, document_id: str, subject: str) -> None:
    """A company document that names the subject's id: no eraser removes it (the receipt fails)."""
    from retrieval.services import document_index

    document_index(
        tenant=tenant,
        document_id=document_id,
        source_uri=f"kb://{document_id}",
        source_version="1",
        data=f"Ticket for {subject}.".encode(),
        media_type="text/plain",
        acl=["group:support"],
        actor="user:test",
        wait=True,
    )


def _erase_subject(tenant, subject: str) -> ErasureRequest:
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    return erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)


def test_keys_that_are_the_subjects_are_redacted_and_no_entry_is_lost():
    from runs.conversations.erasure import Redactor

    redact = Redactor("cust-e970b6", ("Zofia", "delivered"))
    assert redact(
        {
            "orders_by_customer": {"cust-e970b6": ["o-1"], "cust-other": ["o-2"]},
            "contacts": {"zofia": "sister", "delivered_at": "2026-11-02"},
            "c": {"Zofia": 1, "[erased]": "keep"},
        }
    ) == {
        "orders_by_customer": {"[erased]": ["o-1"], "cust-other": ["o-2"]},
        "contacts": {"[erased]": "sister", "delivered_at": "2026-11-02"},
        "c": {"[erased] 2": 1, "[erased]": "keep"},
    }


def test_a_retry_searches_for_what_the_failed_attempt_erased(tenant):
    """The first attempt erases the address from the subject's run but fails (a company document names
    the subject). Deleting the document is not enough: a run of no one still holds the address, and
    the retry, searching for what the first attempt searched for, says so instead of certifying
    clean. A later request that completes leaves the earlier one keeping nothing."""
    from retrieval.services import document_delete

    subject, address = "cust-ba5820", "My new address is 17 Kwiatowa Street, Gdansk 80-001"
    nobodys = _said_and_copied(tenant, subject, address, address)
    _document_naming(tenant, "ticket", subject)
    first = _erase_subject(tenant, subject)
    assert first.status == "failed" and address in first.searched
    document_delete(tenant=tenant, document_id="ticket", actor="user:test")
    again = erasure_execute(tenant_id=tenant.tenant_id, request_id=first.request_id)
    assert again.status == "failed" and again.receipt["final_scan"]["agent_runs.state"] == 1, again.error
    assert again.receipt["searched"]["values"] >= 1
    # The receipt and the request's error name the run that holds it (found from outside: they said
    # "agent_runs.state 1" and nothing led to the run)
    held = {p["place"]: p.get("runs") for p in again.receipt["places"] if p["after"]}
    assert held["agent_runs.state"] == [str(nobodys.run_id)], held
    assert f"; in runs {nobodys.run_id};" in again.error, again.error
    with tenant_scope(tenant.tenant_id):  # the operator deals with the copy (here: the run goes)
        AgentEvent.objects.filter(run=nobodys).delete()
        AgentRun.objects.filter(run_id=nobodys.run_id).delete()
    done = _erase_subject(tenant, subject)  # a new request, as the console's form makes
    assert done.status == "completed" and done.receipt["clean"], done.error
    first.refresh_from_db()
    assert (first.subject_id, first.searched, first.status) == ("", [], "failed")
    assert f"completed by {done.request_id}" in first.error


def test_an_eraser_that_raises_keeps_what_the_attempt_searched_for(tenant):
    """A store fails after the runs eraser redacted the subject's run (a file that cannot be removed,
    Redis gone): the request fails keeping the texts it searched for, so the retry still finds the
    copy in a run of no one instead of certifying clean."""
    subject, iban = "cust-olek-04", "refund to PL27114020040000300201355387 now"
    _said_and_copied(tenant, subject, iban, f"fwd: {iban}")

    class Broken:
        name = "zz_broken_store"

        def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Any:
            from core.erasure import Scope

            return Scope(tenant_id=tenant_id, subject_id=subject_id)

        def erase(self, *, scope: Any, request_id: UUID, subject_digest: str) -> dict[str, int]:
            raise IsADirectoryError(21, "Is a directory")

    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    eraser_register(Broken())
    try:
        with pytest.raises(IsADirectoryError):
            erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    finally:
        eraser_unregister("zz_broken_store")
    request.refresh_from_db()
    assert request.status == "failed" and iban in request.searched
    again = _erase_subject(tenant, subject)  # a new request, the store mended
    assert again.status == "failed" and again.receipt["final_scan"]["agent_runs.state"] == 1, again.error


def test_another_subject_whose_id_continues_this_one_does_not_block_the_erasure(tenant):
    """ "cust-1001-x.2" is another customer, not the token "cust-1001-x" and ".2": the column that
    names whose run it is holds whole ids, so that run neither counts nor blocks the receipt. (Inside
    a text the token rule stays: "cust-1001-x:m1" is how the subject's own message ids are made.)"""
    _subject_with_data(tenant, "cust-1001-x")
    other = run_start(
        tenant=tenant, workflow_name="conversation", input={}, actor="t", subject="cust-1001-x.2"
    ).run
    done = _erase_subject(tenant, "cust-1001-x")
    assert done.status == "completed" and done.receipt["clean"], done.error
    with tenant_scope(tenant.tenant_id):
        assert AgentRun.objects.get(run_id=other.run_id).subject == "cust-1001-x.2"


def test_a_structured_memory_value_gives_its_keys_too(tenant):
    """Memory {"Zofia": "sister"}: the key is the person's data, searched and erased from their runs."""
    subject = "cust-zo2"
    run = run_start(
        tenant=tenant,
        workflow_name="conversation",
        input={"contacts": {"Zofia": "sister"}, "note": "ask Zofia"},
        actor="t",
        subject=subject,
    ).run
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="family",
        key="contacts",
        value={"Zofia": "sister"},
        provenance=said(run_id=str(run.run_id), seq=1),
    )
    done = _erase_subject(tenant, subject)
    assert done.status == "completed" and done.receipt["clean"], done.error
    with tenant_scope(tenant.tenant_id):
        state = AgentRun.objects.get(run_id=run.run_id).state
    assert (state["contacts"], state["note"]) == ({"[erased]": "sister"}, "[erased]")
