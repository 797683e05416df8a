"""A customer can be a retrieval principal of their own and a document can be named after them: the
scan searches retrieval's declared-free columns for the subject's id, and the eraser leaves none of it
(a receipt must not say clean while four tables still name the subject)."""

from __future__ import annotations

import pytest

from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from retrieval.models import DocumentTombstone, Invalidation, Principal, RetrievalSnapshot
from retrieval.search import retrieval_search
from retrieval.services import DocumentDeleted, document_delete, document_index, principal_set
from tests.erasure.agreement import assert_registry_agrees

pytestmark = pytest.mark.django_db

SUBJECT = "cust-7781"


def _ticket(tenant, acl: list[str]) -> None:
    document_index(
        tenant=tenant,
        document_id=f"ticket-{SUBJECT}",
        source_uri=f"crm://tickets/{SUBJECT}",
        source_version="v1",
        data=b"# Ticket\n\nThe parcel arrived broken; a refund was asked for.",
        media_type="text/markdown",
        acl=acl,
        actor="user:agent-1",
        wait=True,
    )


def _erase(tenant) -> dict:
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    receipt = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id).receipt
    assert receipt is not None
    assert_registry_agrees(receipt)
    return receipt


def test_the_subject_as_a_principal_and_in_a_document_id_is_found_then_erased(tenant) -> None:
    principal_set(tenant=tenant, principal=f"user:{SUBJECT}", groups=["group:customers"], actor="user:admin")
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:admin")
    _ticket(tenant, ["group:support", f"user:{SUBJECT}"])
    assert retrieval_search(tenant=tenant, query="parcel refund", principal=f"user:{SUBJECT}").hits
    assert retrieval_search(tenant=tenant, query="parcel refund", principal="user:ann").hits

    receipt = _erase(tenant)
    # The document is the company's: the receipt names it instead of certifying clean.
    assert receipt["clean"] is False
    left = {p["place"] for p in receipt["places"] if p["after"]}
    assert {"retrieval_documents.document_id", "retrieval_chunks.source_uri"} <= left, left
    assert not left & {
        "retrieval_principals.principal",
        "retrieval_snapshots.acl_principal",
        "retrieval_snapshots.hits",
    }

    document_delete(tenant=tenant, document_id=f"ticket-{SUBJECT}", actor="user:compliance")
    receipt = _erase(tenant)
    assert receipt["clean"] is True, {p["place"]: p["after"] for p in receipt["places"] if p["after"]}
    with tenant_scope(tenant.tenant_id):
        assert list(Principal.objects.values_list("principal", flat=True)) == ["user:ann"]
        assert not RetrievalSnapshot.objects.exists()  # the subject's search and ann's that found the ticket
        tombstone = DocumentTombstone.objects.get()
        assert tombstone.document_id_text.startswith("hmac-sha256:") and tombstone.actor == ""
        assert all(SUBJECT not in (i.document_id_text or "") for i in Invalidation.objects.all())
    # The keyed tombstone still refuses the deleted version: an old ingestion cannot bring it back.
    with pytest.raises(DocumentDeleted):
        _ticket(tenant, ["group:support"])


def test_a_document_nothing_erases_keeps_the_receipt_from_saying_clean_and_says_what_to_do(tenant) -> None:
    """A document the subject may read by name is the company's to change: kept, and named."""
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:admin")
    document_index(
        tenant=tenant,
        document_id="faq-1",
        source_uri="kb://faq-1",
        source_version="v1",
        data=b"# FAQ\n\nRefunds take 14 days.",
        media_type="text/markdown",
        acl=["group:support", f"user:{SUBJECT}"],
        actor="user:admin",
        wait=True,
    )
    receipt = _erase(tenant)
    assert receipt["clean"] is False
    places = {p["place"]: p for p in receipt["places"]}
    assert places["retrieval_documents.acl"]["after"] == 1
    assert "through the documents API" in places["retrieval_documents.acl"]["what_to_do"]
    # A declared-free column is listed only where the scan found the subject (never, here).
    assert "retrieval_documents.media_type" not in places


def test_the_subjects_email_in_a_document_keeps_the_receipt_from_saying_clean(tenant) -> None:
    """Documents are searched for the subject's e-mail address, not their id only, even an address
    shorter than 24 characters without a digit, outside the subject's own rows too."""
    from erasure.matching import distinctive
    from memory.services import memory_remember
    from tests.memory.test_memory import said

    assert distinctive("ivo.brandt@example.com") and not distinctive("refund please")
    memory_remember(
        tenant=tenant,
        subject_id=SUBJECT,
        namespace="profile",
        key="email",
        value="zed.quixote@example.org",
        provenance=said(),
    )
    document_index(
        tenant=tenant,
        document_id="faq-1",
        source_uri="kb://faq-1",
        source_version="v1",
        data=b"# FAQ\n\nExample: customer zed.quixote@example.org asked about refunds.",
        media_type="text/markdown",
        acl=["group:support"],
        actor="user:admin",
        wait=True,
    )
    receipt = _erase(tenant)
    assert receipt["clean"] is False
    left = {p["place"] for p in receipt["places"] if p["after"]}
    assert "retrieval_chunks.text" in left, left
    document_delete(tenant=tenant, document_id="faq-1", actor="user:compliance")
    assert _erase(tenant)["clean"] is True


def test_a_principal_named_by_the_subjects_email_is_erased_with_them(tenant) -> None:
    """A principal user:<their e-mail> must not stay after a clean receipt (a scan of declared-free
    columns for the subject's id only would miss it)."""
    from memory.services import memory_remember
    from tests.memory.test_memory import said

    email = "nora.quist@example.net"
    memory_remember(
        tenant=tenant, subject_id=SUBJECT, namespace="profile", key="email", value=email, provenance=said()
    )
    principal_set(tenant=tenant, principal=f"user:{email}", groups=["group:customers"], actor="user:admin")
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:admin")
    receipt = _erase(tenant)
    assert receipt["clean"] is True, {p: n for p, n in receipt["final_scan"].items() if n}
    with tenant_scope(tenant.tenant_id):
        assert list(Principal.objects.values_list("principal", flat=True)) == ["user:ann"]


def test_an_acl_naming_the_subjects_email_goes_with_its_documents(tenant) -> None:
    """A document readable by user:<their e-mail>, deleted as the receipt asks, takes its ACL row
    with it (no chunk holds it any more): left behind, every retry of the erasure would fail on it,
    and the subject's memory would be kept for good."""
    from django.db import connection

    from memory.models import MemoryItem
    from memory.services import memory_remember
    from tests.memory.test_memory import said

    email = "zofia.w7731@example.pl"
    memory_remember(
        tenant=tenant, subject_id=SUBJECT, namespace="profile", key="email", value=email, provenance=said()
    )
    principal_set(tenant=tenant, principal=f"user:{email}", groups=["group:support"], actor="user:admin")
    document_index(
        tenant=tenant,
        document_id="faq-2",
        source_uri="kb://faq-2",
        source_version="v1",
        data=b"# FAQ\n\nRefunds take 14 days.",
        media_type="text/markdown",
        acl=["group:support", f"user:{email}"],
        actor="user:admin",
        wait=True,
    )
    assert _erase(tenant)["clean"] is False  # the document's ACL names them: deleted through its API
    document_delete(tenant=tenant, document_id="faq-2", actor="user:compliance")
    receipt = _erase(tenant)
    assert receipt["clean"] is True, {p: n for p, n in receipt["final_scan"].items() if n}
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM retrieval_acls WHERE array_to_string(acl, ' ') LIKE %s", [f"%{email}%"]
        )
        assert cursor.fetchone()[0] == 0
        assert not MemoryItem.objects.filter(subject_id=SUBJECT).exists()


def test_a_subject_id_with_like_wildcards_touches_only_its_own_rows(tenant) -> None:
    """Erasing "K_17" leaves the snapshot of a search that found document "K-17" (the id unescaped in
    ILIKE, _ would be any character, and "_" alone every snapshot)."""
    principal_set(tenant=tenant, principal="user:bob", groups=["group:g1"], actor="user:admin")
    document_index(
        tenant=tenant,
        document_id="K-17",
        source_uri="kb://K-17",
        source_version="v1",
        data=b"# Kettles\n\nDescaling a kettle takes vinegar.",
        media_type="text/markdown",
        acl=["group:g1"],
        actor="user:admin",
        wait=True,
    )
    assert retrieval_search(tenant=tenant, query="kettle descaling", principal="user:bob").hits
    with tenant_scope(tenant.tenant_id):
        assert RetrievalSnapshot.objects.count() == 1
    for subject in ("K_17", "_", "%"):
        request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="user:compliance")
        erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    with tenant_scope(tenant.tenant_id):
        assert RetrievalSnapshot.objects.count() == 1
