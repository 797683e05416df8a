"""An erasure that did not finish: what it keeps so that a retry finds what it erased, and how a
store's error is recorded."""

from __future__ import annotations

import json
from uuid import UUID

import pytest

from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.registry import Eraser
from erasure.services import erasure_execute, erasure_request_create
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from tests.erasure.test_erasure_everywhere import _with
from tests.erasure.test_erasure_texts import _erase_subject, _subject_with_data

pytestmark = pytest.mark.django_db(transaction=True)


class Broken(Eraser):
    """A store that fails (a file that cannot be removed, Redis gone)."""

    name = "zz_broken_store"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        raise IsADirectoryError(21, "Is a directory")


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
    # The receipt and the request's error name the run that holds it ("agent_runs.state 1" alone
    # leads to no run)
    held = {p["place"]: p.get("runs") for p in again.receipt["places"] if p["after"]}
    assert held["agent_runs.state"] == [str(nobodys.run_id)], held
    assert f", in runs {nobodys.run_id}: " in again.error, again.error
    assert "an operator removes that copy" in again.error and "/retry" in again.error
    with tenant_scope(tenant.tenant_id):  # the operator deals with the copy (here: the run goes)
        AgentEvent.objects.filter(run=nobodys).delete()
        AgentRun.objects.filter(run_id=nobodys.run_id).delete()
    done = _erase_subject(tenant, subject)  # a new request, as the console's form makes
    assert done.status == "completed" and done.receipt["clean"], done.error
    first.refresh_from_db()
    assert (first.subject_id, first.searched, first.status) == ("", [], "failed")
    assert f"completed by {done.request_id}" in first.error


def test_an_eraser_that_raises_keeps_what_the_attempt_searched_for(tenant, settings):
    """A store fails after the runs eraser redacted the subject's run (a file that cannot be removed,
    Redis gone): the request fails keeping the texts it searched for, so the retry still finds the
    copy in a run of no one instead of certifying clean."""
    subject, iban = "cust-olek-04", "refund to PL27114020040000300201355387 now"
    _said_and_copied(tenant, subject, iban, f"fwd: {iban}")

    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="t")
    names = list(settings.ERASERS)
    _with(settings, Broken)
    with pytest.raises(IsADirectoryError):
        erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    settings.ERASERS = names  # the store mended
    request.refresh_from_db()
    assert request.status == "failed" and iban in request.searched
    # The request says where it stopped and what to do, in words; it keeps no id of the subject there.
    assert "in the zz_broken_store step: IsADirectoryError" in request.error and "/retry" in request.error
    again = _erase_subject(tenant, subject)  # a new request, the store mended
    assert again.status == "failed" and again.receipt["final_scan"]["agent_runs.state"] == 1, again.error
