"""A subject's text in every place Keeper keeps it; after erasure, raw SQL over every registered column,
Redis and the artifact store finds no copy, the receipt counts each place before and after, history
still verifies and replays, and an unfinished run is refused with `subject_erased`."""

from __future__ import annotations

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
from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.models import ErasureRequest
from erasure.registry import Eraser, registered_columns
from erasure.services import erasure_execute, erasure_request_create
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
from tests.erasure.agreement import assert_registry_agrees
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
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert_registry_agrees(done.receipt)
    return done


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
    grant = apply(m.LeaseTaken(run_id=chat.run_id, tenant_id=chat.tenant_id, owner="w-stale", ttl=60))
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

    held = m.Held(chat.run_id, grant.tenant_id, grant.owner, grant.epoch, grant.revision, 1)
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


class LateWriter(Eraser):
    """Writes the subject's text back into their first run after the runs eraser (named after it)."""

    name = "zz_late_writer"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        with tenant_scope(scope.tenant_id):
            theirs = AgentRun.objects.filter(run_id__in=scope.run_ids, parent_run__isnull=True)
            return {"written": theirs.update(suspend_detail=f"{MESSAGE} (0)")}


def _with(settings: Any, eraser: type[Eraser]) -> None:
    """Name one more eraser, right after the runs eraser, in settings.ERASERS."""
    names = list(settings.ERASERS)
    at = names.index("erasure.erasers.runs.RunsEraser") + 1
    settings.ERASERS = [*names[:at], f"{eraser.__module__}.{eraser.__name__}", *names[at:]]


def test_a_place_the_erasers_missed_makes_the_receipt_not_clean(tenant, settings):
    chat = _conversation(tenant)
    AuditEntry.objects.create(
        actor="user:eve",
        tenant=tenant,
        action="resume",
        target_type="run",
        target_id=str(chat.run_id),
        details={"customer": SUBJECT},  # details are never rewritten: the scan must find this
    )

    _with(settings, LateWriter)
    done = _erase(tenant)
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
