"""The compliance screens: a subject's overview across every store, erasure with a confirmation
step, the audit entry (digest only), progress, the receipt and its JSON download, tenant isolation,
and hostile memory values rendered escaped."""

from __future__ import annotations

import json
import re
from typing import Any
from uuid import UUID, uuid4

import pytest
import redis
from django.urls import reverse

from console.models import AuditEntry
from console.selectors import subject_overview
from console.urls_compliance import urlpatterns
from core.digests import subject_digest
from core.tenancy import tenant_scope
from erasure.erasers.retrieval import RetrievalEraser
from erasure.matching import Scope
from erasure.models import ErasureRequest
from erasure.services import erasure_execute, erasure_request_create
from memory.projection import memory_project
from memory.services import memory_invalidate, memory_remember, memory_supersede
from runs.conversations.messages import conversation_append
from runs.conversations.sessions import redis_client, session_window
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db

SUBJECT = "cust-7"


def seed_subject(tenant: Any, subject: str = SUBJECT) -> dict[str, Any]:
    """A subject with a supersede chain, an invalidated claim, vectors, a conversation run with a
    Redis window and a summary; plus another subject that must never show up."""
    from runs.conversations.compaction.services import summary_create
    from runs.conversations.compaction.tokens import token_counter

    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    for i in range(4):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=f"m{i}",
            body={"content": f"Please write to me in English, message {i}"},
            actor="t",
        )
    first = memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="preference",
        key="language",
        value="russian",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    second = memory_supersede(
        tenant=tenant,
        memory_id=first.memory_id,
        value="english",
        provenance=said(run_id=str(run.run_id), seq=4),
    )
    city = memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="profile",
        key="city",
        value="Oslo",
        provenance=said(run_id=str(run.run_id), seq=3),
    )
    memory_invalidate(tenant=tenant, memory_id=city.memory_id, reason="customer moved")
    memory_remember(
        tenant=tenant,
        subject_id="someone-else",
        namespace="profile",
        key="city",
        value="Bergen",
        provenance=said(),
    )
    memory_project(tenant=tenant)
    summary_create(
        run=run,
        events=list(AgentEvent.objects.filter(run=run, seq__lte=3).order_by("seq")),
        counter=token_counter("gpt-4"),
    )
    session_window(run=run)
    return {"run": run, "first": first, "second": second, "city": city}


def overview_url(tenant: str = "acme", subject: str = SUBJECT) -> str:
    return f"{reverse('console:compliance_home')}?tenant={tenant}&subject={subject}"


def test_every_compliance_view_needs_the_compliance_role(as_role, client):
    for pattern in urlpatterns:
        assert pattern.callback.required_roles == ("compliance",), pattern.name
    assert client.get("/compliance/").status_code == 302  # anonymous: to sign-in
    assert as_role("support").get("/compliance/").status_code == 403
    assert as_role("engineer").get("/compliance/acme/erasures/").status_code == 403


def test_the_overview_lists_every_store_with_the_supersede_chain(as_role, tenant):
    seeded = seed_subject(tenant)
    page = as_role("compliance").get(overview_url())
    assert page.status_code == 200
    html = page.content.decode()
    first, second = str(seeded["first"].memory_id), str(seeded["second"].memory_id)
    # newest first, linked both ways, each with its provenance
    assert html.index(f'id="m-{second}"') < html.index(f'id="m-{first}"')
    assert f'supersedes <a href="#m-{first}">' in html and f'superseded by <a href="#m-{second}">' in html
    assert "supersede chain of 2" in html and "customer moved" in html and "user_statement" in html
    assert "&quot;english&quot;" in html and "&quot;russian&quot;" in html and "Bergen" not in html
    assert "hashing" in html and re.search(r"-?0\.\d{3,}, -?0\.\d{3,}", html) is None  # counts, never vectors
    assert str(seeded["run"].run_id) in html and "4 entries" in html  # the Redis window
    assert "Summaries (1)" in html
    assert subject_digest(tenant_id=tenant.tenant_id, subject_id=SUBJECT) in html


def test_a_redis_outage_shows_unavailable_instead_of_failing(as_role, tenant, monkeypatch):
    seed_subject(tenant)
    monkeypatch.setattr(
        "runs.conversations.selectors.redis_client",
        lambda: redis.Redis(unix_socket_path="/nonexistent/redis.sock", socket_timeout=0.5),
    )
    page = as_role("compliance").get(overview_url())
    assert page.status_code == 200
    assert b"Redis is unavailable" in page.content and b"unavailable</span>" in page.content


def test_another_tenant_and_its_requests_are_not_found(as_role, tenant, other_tenant):
    theirs = erasure_request_create(tenant=other_tenant, subject_id="x", requested_by="user:other")
    client = as_role("compliance")
    assert client.get(overview_url(tenant="globex")).status_code == 404
    assert client.get("/compliance/globex/erasures/").status_code == 404
    assert client.get(f"/compliance/globex/erase/?subject={SUBJECT}").status_code == 404
    for url in (
        f"/compliance/acme/erasures/{theirs.request_id}/",
        f"/compliance/acme/erasures/{theirs.request_id}/receipt.json",
        f"/compliance/globex/erasures/{theirs.request_id}/",
    ):
        assert client.get(url).status_code == 404, url
    picker = client.get("/compliance/").content.decode()
    assert 'value="acme"' in picker and "globex" not in picker


def test_a_mismatched_confirmation_is_refused_and_creates_nothing(as_role, tenant):
    seed_subject(tenant)
    client = as_role("compliance")
    confirm = client.get(f"/compliance/acme/erase/?subject={SUBJECT}")
    assert confirm.status_code == 200 and b"Type the subject id again" in confirm.content
    assert b"memory_items" in confirm.content
    for data in (
        {"subject_confirm": "cust-8", "note": "ticket 12"},
        {"subject_confirm": SUBJECT, "note": " "},
        {"subject_confirm": SUBJECT, "note": f"erase {SUBJECT} please"},
    ):
        refused = client.post("/compliance/acme/erase/", {"subject": SUBJECT, **data})
        assert refused.status_code == 422 and b'role="alert"' in refused.content
    with tenant_scope(tenant.tenant_id):
        assert ErasureRequest.objects.count() == 0
    assert not AuditEntry.objects.filter(action="erase").exists()


def test_erasing_creates_the_request_and_one_audit_entry_without_the_subject_id(as_role, tenant):
    seed_subject(tenant)
    response = as_role("compliance").post(
        "/compliance/acme/erase/", {"subject": SUBJECT, "subject_confirm": SUBJECT, "note": "ticket GDPR-12"}
    )
    with tenant_scope(tenant.tenant_id):
        [created] = ErasureRequest.objects.all()
    assert response.status_code == 302
    assert response["Location"] == f"/compliance/acme/erasures/{created.request_id}/"
    [entry] = AuditEntry.objects.filter(action="erase")
    assert (entry.actor, entry.tenant_id, entry.target_type, entry.target_id, entry.note) == (
        "user:compliance",
        tenant.tenant_id,
        "erasure_request",
        str(created.request_id),
        "ticket GDPR-12",
    )
    assert entry.details["subject_digest"] == created.subject_digest
    assert entry.details["expected"]["memory_items"] == 3
    row = json.dumps(
        [entry.actor, entry.action, entry.target_type, entry.target_id, entry.note, entry.details]
    )
    assert SUBJECT not in row and "english" not in row
    # Sent again while that request waits (a double click, a second tab): the same request, and the
    # person's one entry (four POSTs: one request, and one entry, not four).
    again = as_role("compliance").post(
        "/compliance/acme/erase/", {"subject": SUBJECT, "subject_confirm": SUBJECT, "note": "ticket GDPR-12"}
    )
    assert again["Location"] == f"/compliance/acme/erasures/{created.request_id}/"
    assert AuditEntry.objects.filter(action="erase").count() == 1


def test_progress_then_receipt_and_its_json_download(as_role, tenant):
    seed_subject(tenant)
    created = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    client = as_role("compliance")
    detail = f"/compliance/acme/erasures/{created.request_id}/"
    pending = client.get(detail, headers={"HX-Request": "true"})
    assert pending.status_code == 200 and b"<html" not in pending.content
    assert b'hx-trigger="every 1s"' in pending.content and b"pending" in pending.content
    assert "HX-Request" in pending["Vary"]
    assert client.get(detail + "receipt.json").status_code == 404  # no receipt yet

    erasure_execute(tenant_id=tenant.tenant_id, request_id=created.request_id)
    done = client.get(detail, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in done and "completed" in done and "found nothing" in done
    page = client.get(detail).content.decode()
    assert "<html" in page and "Download JSON" in page and created.subject_digest in page
    assert SUBJECT not in page

    download = client.get(detail + "receipt.json")
    assert download.status_code == 200 and download["Content-Type"] == "application/json"
    assert (
        download["Content-Disposition"] == f'attachment; filename="erasure-receipt-{created.request_id}.json"'
    )
    receipt = json.loads(download.content)
    assert receipt["clean"] is True and receipt["counts"]["memory_items"] == 3
    assert receipt["counts"]["runs.summaries"] == 1 and set(receipt["final_scan"].values()) == {0}
    assert receipt["subject_digest"] == created.subject_digest and SUBJECT not in download.content.decode()

    after = client.get(overview_url()).content.decode()
    assert "Memory items (0)" in after and ">completed</span>" in after  # the past request, by digest
    listing = client.get("/compliance/acme/erasures/").content.decode()
    assert str(created.request_id) in listing and SUBJECT not in listing


def _nested(depth: int) -> Any:
    value: Any = "bottom <b>deep</b>"
    for i in range(depth):
        value = {f"k{i}": [value]} if i % 2 else {f"k{i}": value}
    return value


HOSTILE = {
    "script": "<script>alert('pwned')</script>",
    "long": "A" * 60_000,
    "bidi": "مرحبا بالعالم 👋🏽 שלום \u202eevil\u202c 🇳🇴👨‍👩‍👧",
    "nested": _nested(300),
    "attr": '"><img src=x onerror=alert(1)>',
}


def test_hostile_memory_values_render_escaped_and_the_page_stays_usable(as_role, tenant):
    subject = "<script>s</script>"
    for key, value in HOSTILE.items():
        memory_remember(
            tenant=tenant,
            subject_id=subject,
            namespace="<i>ns</i>",
            key=key,
            value=value,
            provenance=said(source_id="<svg onload=alert(2)>"),
            reviewed=True,  # bidi and zero-width text would be held for review: approved, as a person would
        )
    client = as_role("compliance")
    page = client.get(reverse("console:compliance_home"), {"tenant": "acme", "subject": subject})
    html = page.content.decode()
    assert page.status_code == 200
    for raw in (
        "<script>alert",
        "<script>s</script>",
        "<img src=x",
        "<svg onload",
        "<i>ns</i>",
        "<b>deep</b>",
    ):
        assert raw not in html, raw
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    assert "مرحبا بالعالم 👋🏽" in html and "more characters not shown" in html
    assert len(html) < 400_000  # a 60,000-character value is cut, not dumped
    assert "bottom &lt;b&gt;deep&lt;/b&gt;" in html  # the deep value is shown, escaped
    confirm = client.get(reverse("console:compliance_erase", args=["acme"]), {"subject": subject})
    assert confirm.status_code == 200 and "<script>s</script>" not in confirm.content.decode()
    assert "&lt;script&gt;s&lt;/script&gt;" in confirm.content.decode()


def test_a_too_long_subject_id_is_a_form_error(as_role, tenant):
    client = as_role("compliance")
    assert client.get(overview_url(subject="x" * 201)).status_code == 422
    assert client.post("/compliance/acme/erase/", {"subject": "", "subject_confirm": ""}).status_code == 422


def test_the_session_window_count_names_exactly_this_subject(tenant):
    keys = [
        f"session:{tenant.tenant_id}:{subject}:{uuid4()}" for subject in ("cust-7", "cust-7:b", "cust-77")
    ]
    for key in keys:
        redis_client().rpush(key, "{}")
    try:
        windows = {s.key: s.count for s in subject_overview(tenant=tenant, subject_id="cust-7").stores}
        assert windows["runs.redis_session_windows"] == 1
        glob = {s.key: s.count for s in subject_overview(tenant=tenant, subject_id="cust-*").stores}
        assert glob["runs.redis_session_windows"] == 0
    finally:
        redis_client().delete(*keys)


def test_a_subject_with_only_a_run_is_not_shown_as_nothing_stored(as_role, tenant):
    """The overview counts every registered place, as the receipt will: a refund run with a reason and
    no conversation or memory still holds the subject's data."""
    run_start(
        tenant=tenant,
        workflow_name="demo.countdown",
        input={"n": 1, "reason": "parcel left at Elm Road 77b"},
        actor="t",
        subject="cust-vv-1",
    )
    with tenant_scope(tenant.tenant_id):
        overview = subject_overview(tenant=tenant, subject_id="cust-vv-1")
    assert not overview.nothing_stored
    found = {p.key: p.count for p in overview.places}
    assert found["agent_runs.subject"] == 1 and found["agent_events.state"] >= 1
    html = as_role("compliance").get(overview_url(subject="cust-vv-1")).content.decode()
    assert "Nothing about this subject is stored" not in html and "agent_runs.subject" in html


class RetrievalAway(RetrievalEraser):
    """Retrieval's places, with an eraser that erases nothing this time (its store was away)."""

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        return {}


def test_a_receipt_left_not_clean_says_what_remains_apart_from_the_memory_kept_on_purpose(
    as_role, tenant, settings
):
    """One place left behind reads "left behind in 1 store", not 6 (the other five are the subject's
    memory, kept until nothing else holds their data)."""
    from retrieval.services import principal_set

    seed_subject(tenant)
    principal_set(tenant=tenant, principal=f"user:{SUBJECT}", groups=["group:customers"], actor="user:admin")
    created = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    settings.ERASERS = [  # the principal stays: one place left behind
        f"{__name__}.RetrievalAway" if p.endswith(".RetrievalEraser") else p for p in settings.ERASERS
    ]
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=created.request_id)
    assert done.receipt["clean"] is False
    page = as_role("compliance").get(f"/compliance/acme/erasures/{created.request_id}/").content.decode()
    assert "left behind in 1 store; the subject's memory (" in page, page


def test_a_receipt_left_not_clean_names_the_runs_that_hold_the_subjects_data(as_role, tenant):
    """A run started without a subject whose input names them keeps the erasure from finishing, and
    the receipt and the page say which run it is."""
    seed_subject(tenant)
    stray = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 1, "note": f"for {SUBJECT}"}, actor="t"
    ).run
    created = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=created.request_id)
    assert done.receipt["clean"] is False
    runs = {p["place"]: p.get("runs") for p in done.receipt["places"] if p["after"]}
    assert runs["agent_runs.state"] == [str(stray.run_id)], runs
    page = as_role("compliance").get(f"/compliance/acme/erasures/{created.request_id}/").content.decode()
    assert f'in run <code class="wrap">{stray.run_id}</code>' in page and f"in runs {stray.run_id}" in page


def test_a_subject_named_in_an_api_key_label_and_a_webhook_url_is_shown_not_a_500(as_role, tenant):
    """The overview and the erase page show a subject whose id is in a declared-free column (an API
    key's label, a webhook URL), the subjects spread furthest, not a 500 (KeyError)."""
    from core.api_auth import api_key_create
    from runs.webhooks.models import WebhookSubscription

    subject = "cust-repro-55555"
    api_key_create(tenant=tenant, name=f"key for {subject}", scope="read")
    WebhookSubscription.objects.create(
        tenant=tenant,
        url=f"https://hooks.example.com/h/{subject}",
        secret="s" * 32,
        event_types=["run.completed"],
    )
    client = as_role("compliance")
    page = client.get(overview_url(subject=subject))
    assert page.status_code == 200
    html = page.content.decode()
    assert "api_keys.name" in html and "webhook_subscriptions.url" in html
    assert "Nothing about this subject is stored" not in html
    confirm = client.get(f"/compliance/acme/erase/?subject={subject}")
    assert confirm.status_code == 200 and "webhook_subscriptions.url" in confirm.content.decode()


def test_a_failed_erasure_says_what_to_do_and_retry_picks_it_up_from_its_page(as_role, tenant):
    """A failed request's page says in plain words what is left and what to do, and offers Retry:
    the same request goes back to a worker (audited, compliance only) and then completes."""
    from retrieval.services import document_delete, document_index

    seed_subject(tenant)
    document_index(
        tenant=tenant,
        document_id=f"ticket-{SUBJECT}",
        source_uri="crm://tickets/1",
        source_version="v1",
        data=b"# Ticket\n\nA parcel arrived broken.",
        media_type="text/markdown",
        acl=["group:support"],
        actor="user:admin",
        wait=True,
    )
    created = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    failed = erasure_execute(tenant_id=tenant.tenant_id, request_id=created.request_id)
    assert failed.status == "failed"
    page_url = f"/compliance/acme/erasures/{created.request_id}/"
    page = as_role("compliance").get(page_url).content.decode()
    assert "through the documents API" in page and ">Retry the erasure</button>" in page
    # One line for the one document (it shows in several columns of the knowledge base), with what to
    # do with it in words, above the error as recorded.
    left = page[page.index('id="erasure-failed"') : page.index("the error as recorded")]
    assert left.count("the knowledge base (documents the company wrote)") == 1
    assert "<strong>What to do:</strong> a document names the subject" in left
    retry_url = f"/compliance/acme/erasures/{created.request_id}/retry/"
    assert as_role("support").post(retry_url).status_code == 403
    document_delete(tenant=tenant, document_id=f"ticket-{SUBJECT}", actor="user:admin")
    answer = as_role("compliance").post(retry_url)
    assert answer.status_code == 302 and answer["Location"] == page_url
    created.refresh_from_db()
    assert (created.status, created.error, created.receipt) == ("pending", "", None)
    [entry] = AuditEntry.objects.filter(action="erase_retry")
    assert (entry.target_id, entry.actor) == (str(created.request_id), "user:compliance")
    assert SUBJECT not in entry.note + json.dumps(entry.details)
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=created.request_id)  # the worker
    assert done.status == "completed" and done.receipt["clean"], done.error
    assert ">Retry the erasure</button>" not in as_role("compliance").get(page_url).content.decode()
