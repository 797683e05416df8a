"""Which texts are the subject's: whole words, whole id tokens, keys of an object, notes about them;
and what is nobody's: codes, another customer's words and ids."""

from __future__ import annotations

import json

import pytest

from console.models import AuditEntry
from core.tenancy import tenant_scope
from erasure.models import ErasureRequest
from erasure.services import erasure_execute, erasure_request_create
from memory.services import memory_remember
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db(transaction=True)


def test_short_values_are_erased_as_whole_words():
    from erasure.redactor import Redactor

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


def _erase_subject(tenant, subject: str) -> ErasureRequest:
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    return erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)


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
    from erasure.redactor import Redactor

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


def test_keys_that_are_the_subjects_are_redacted_and_no_entry_is_lost():
    from erasure.redactor import Redactor

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
