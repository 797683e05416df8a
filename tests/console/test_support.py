"""The support inbox and its actions through the Django test client: tenant isolation, POST only,
required notes, one audit entry and one run event per action, refusals shown with a 4xx, and
hostile content rendered escaped."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from console.models import AuditEntry
from console.urls_support import urlpatterns
from core.tenancy import tenant_bind
from runs.engine.approvals import approval_check
from runs.engine.operations import (
    operation_mark_started,
    operation_mark_unknown,
    operation_prepare_once,
)
from runs.engine.registry import ToolContract, ToolLookup
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, ToolOperation

pytestmark = pytest.mark.django_db
REQUEST = {"order_id": "o-1", "amount_minor": 2500, "currency": "EUR"}
HOSTILE = "<script>alert('x')</script>"
RTL = "طلب استرداد ✅🙂"
LONG = "A" * 1500


def _suspended_run(tenant, reason: str = "approval_required", detail: str = "") -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason=reason, detail=detail)
    with tenant_bind(tenant.tenant_id):  # row-level security: maybe not the test's own tenant
        run.refresh_from_db()
    return run


def _approval(
    tenant, request: Any = None, reasons: Any = None, digest: str = "sha256:" + "ab" * 32
) -> Approval:
    run = _suspended_run(tenant)
    return approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request=REQUEST if request is None else request,
        request_digest=digest,
        reasons=["delivered", "within the 30-day window"] if reasons is None else reasons,
        actor="w1",
    ).approval


def _unknown_operation(tenant, note: str = "connection dropped", suspend: bool = True) -> ToolOperation:
    with tenant_bind(tenant.tenant_id):  # row-level security: maybe not the test's own tenant
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
        grant = apply(
            m.LeaseTaken(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner="w1",
                ttl=30,
            )
        )
        assert grant is not None
        ids = {"tenant_id": tenant.tenant_id, "operation_id": "refund:o-1", "actor": "w1"}
        operation_prepare_once(
            **ids,
            run_id=run.run_id,
            step_id="refund",
            tool_name="payments.refund",
            tool_contract_version="payments.v1",
            request=REQUEST,
        )
        operation_mark_started(**ids, run_id=run.run_id, lease_epoch=grant.epoch)
        operation_mark_unknown(**ids, note=note)
        if suspend:
            run_suspend(
                run_id=run.run_id,
                actor="w1",
                reason="reconciliation_required",
                detail="refund refund:o-1 may have been applied; check the payment and reconcile",
            )
        return ToolOperation.objects.get(tenant=tenant, operation_id="refund:o-1")


def _refused_run(tenant) -> AgentRun:
    """A run whose resume was refused: its state was changed outside the engine."""
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 5}, actor="test").run
    run_advance(run_id=run.run_id, worker_id="w")
    run_suspend(run_id=run.run_id, actor="user:ops", reason="manual_review")
    run.refresh_from_db()
    AgentRun.objects.filter(pk=run.pk).update(state={**run.state, "remaining": 0})
    run_resume(run_id=run.run_id, actor="user:ops", note="go on")
    run_advance(run_id=run.run_id, worker_id="w2")
    run.refresh_from_db()
    assert run.status == "suspended" and run.suspend_reason == "state_digest_mismatch"
    return run


def _last_event(run_id: Any) -> AgentEvent:
    return AgentEvent.objects.filter(run_id=run_id).order_by("-seq").first()  # type: ignore[return-value]


def _audit() -> list[AuditEntry]:
    return list(AuditEntry.objects.exclude(action__in=["sign_in", "lookup"]).order_by("id"))


@pytest.fixture
def support(as_role):
    return as_role("support")


@pytest.fixture(autouse=True)
def unreachable_payments(settings):
    # Nothing listens on port 9: a lookup in these tests is "unavailable" unless a test fakes it.
    settings.KEEPER_SANDBOX_URL = "http://127.0.0.1:9/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0


def _action_targets(tenant) -> dict[str, tuple[str, dict[str, str]]]:
    """One object per action, in `tenant`: (url, a valid form)."""
    approval_a, approval_r = _approval(tenant), _approval(tenant)
    op, run = _unknown_operation(tenant), _suspended_run(tenant, reason="manual_review")
    return {
        "approve": (
            reverse("console:support_approval_approve", args=[approval_a.approval_id]),
            {"note": "ok"},
        ),
        "reject": (reverse("console:support_approval_reject", args=[approval_r.approval_id]), {"note": "no"}),
        "reconcile": (
            reverse("console:support_operation_reconcile", args=[op.pk]),
            # Nothing here can check the reference (the payments API is unreachable): typed twice.
            {
                "note": "PSP shows it",
                "outcome": "applied",
                "external_ref": "rf_9",
                "external_ref_again": "rf_9",
                "resume": "on",
            },
        ),
        "resume": (reverse("console:support_run_resume", args=[run.run_id]), {"note": "checked"}),
        "cancel": (reverse("console:support_run_cancel", args=[run.run_id]), {"note": "customer withdrew"}),
    }


# --- access --------------------------------------------------------------------------------------


def test_every_support_view_needs_the_support_role(client, role_users, tenant):
    approval = _approval(tenant)
    assert all(getattr(p.callback, "required_roles", None) == ("support",) for p in urlpatterns)
    inbox = reverse("console:support_inbox")
    assert client.get(inbox)["Location"].startswith("/sign-in/?next=")
    page = reverse("console:support_approval", args=[approval.approval_id])
    for role in ("engineer", "compliance", "nobody"):
        client.force_login(role_users[role])
        assert client.get(inbox).status_code == 403
        assert client.post(page + "approve/", {"note": "x"}).status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    # Each refused action is on the record (not only in log lines); a page
    # refused is not an action.
    assert [(e.actor, e.action, e.target_id, e.details) for e in _audit()] == [
        (
            f"user:{role}",
            "denied",
            "console:support_approval_approve",
            {"method": "POST", "needs": ["support"]},
        )
        for role in ("engineer", "compliance", "nobody")
    ]
    assert all(e.note == "this needs the support role" and e.tenant_id is None for e in _audit())


def test_actions_are_post_only(support, tenant):
    for url, _ in _action_targets(tenant).values():
        assert support.get(url).status_code == 405, url
    lookup = reverse("console:support_operation_lookup", args=[ToolOperation.objects.get().pk])
    assert support.get(lookup).status_code == 405
    assert not _audit()


def test_actions_need_the_csrf_token(client, role_users, tenant):
    client.handler.enforce_csrf_checks = True
    client.force_login(role_users["support"])
    url, form = _action_targets(tenant)["cancel"]
    assert client.post(url, form).status_code == 403
    [denied] = _audit()
    assert (denied.actor, denied.action, denied.details) == ("user:support", "denied", {"method": "POST"})
    assert denied.note.startswith("CSRF check failed") and denied.target_id.startswith("console:")


def test_a_refused_origin_is_audited_without_what_the_browser_sent_and_a_flood_is_written_once(
    client, role_users, tenant
):
    """An Origin header must not reach the append-only log inside Django's reason, nor 1,200 refused
    POSTs write 1,200 rows. The reason keeps none of the header; a refusal repeated
    within a minute is written once."""
    client.handler.enforce_csrf_checks = True
    client.force_login(role_users["support"])
    client.get(reverse("console:support_inbox"))  # the CSRF cookie
    token = client.cookies["csrftoken"].value
    url, form = _action_targets(tenant)["cancel"]
    for _ in range(5):
        answer = client.post(
            url, {**form, "csrfmiddlewaretoken": token}, HTTP_ORIGIN="http://alice-smith-1980-01-01.example"
        )
        assert answer.status_code == 403
    [denied] = _audit()
    assert denied.note == "CSRF check failed: Origin checking failed (not a trusted origin)", denied.note
    assert "alice" not in json.dumps([denied.note, denied.details, denied.target_id])


def test_the_inbox_shows_only_the_users_tenants(support, tenant, other_tenant):
    approval = _approval(tenant)
    _approval(other_tenant, request={"order_id": "globex-order", "amount_minor": 100, "currency": "USD"})
    op = _unknown_operation(tenant)
    refused = _refused_run(tenant)
    page = support.get(reverse("console:support_inbox")).content.decode()
    assert "globex-order" not in page
    # An approval its workflow (demo.countdown) did not declare: its request's fields, plainly.
    assert "Approval asked by demo.countdown at step approve" in page
    assert "order_id: o-1" in page and "amount_minor: 2500" in page and "within the 30-day window" in page
    assert "expires in 23 h 59 min" in page
    assert f'data-approval="{approval.approval_id}"' in page and approval.request_digest not in page
    assert f'data-operation="{op.pk}"' in page and "connection dropped" in page
    # A refused resume in words, for whoever can fix it; no digest, no check code.
    assert (
        f'data-run="{refused.run_id}"' in page and "changed outside Keeper" in page and "an engineer" in page
    )
    assert "state_digest_mismatch" not in page and "sha256:" not in page
    assert 'hx-trigger="every 3s"' in page


def test_a_long_inbox_says_how_many_wait_and_keeps_each_run_in_its_list(support, tenant, monkeypatch):
    """Past 100 the inbox says how many wait, not "(100)"; the rest of the approvals are not listed
    as "other suspended runs" without a Review button, and runs whose subject was erased (nothing can
    resume them) are not offered there."""
    from console import selectors

    monkeypatch.setattr(selectors, "INBOX_LIMIT", 2)
    approvals = [_approval(tenant) for _ in range(3)]
    waiting = _suspended_run(tenant, reason="manual_review", detail="look at the address")
    erased = _suspended_run(tenant, reason="subject_erased", detail="erased")
    page = support.get(reverse("console:support_inbox")).content.decode()
    assert "Pending approvals (first 2 of 3)" in " ".join(page.split()).replace('<span class="count">', "")
    assert "Each list shows its first" in page
    assert f'data-run="{waiting.run_id}"' in page and "look at the address" in page
    for approval in approvals:  # the third is past the first 2, and not listed as another kind of wait
        assert f'data-run="{approval.run_id}"' not in page
    assert f'data-run="{erased.run_id}"' not in page
    assert "4 items" in page  # 3 approvals (2 shown) and the other run
    run_page = support.get(reverse("console:support_run", args=[erased.run_id])).content.decode()
    assert "Its subject was erased: the run never continues" in run_page
    assert reverse("console:support_run_resume", args=[erased.run_id]) not in run_page
    assert reverse("console:support_run_resume", args=[waiting.run_id]) in (
        support.get(reverse("console:support_run", args=[waiting.run_id])).content.decode()
    )


def test_the_inbox_poll_returns_only_the_rows(support, tenant):
    _approval(tenant)
    response = support.get(
        reverse("console:support_inbox"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="inbox-rows"
    )
    body = response.content.decode()
    assert (
        response.status_code == 200 and "<html" not in body and "Pending approvals" in body and "o-1" in body
    )


def test_the_run_status_poll_of_each_page_returns_only_the_run_part(support, tenant):
    approval = _approval(tenant)
    op = _unknown_operation(tenant)
    for url, run_id in (
        (reverse("console:support_approval", args=[approval.approval_id]), approval.run_id),
        (reverse("console:support_operation", args=[op.pk]), op.run_id),
        (reverse("console:support_run", args=[approval.run_id]), approval.run_id),
    ):
        full = support.get(url).content.decode()
        polled = support.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-status").content.decode()
        assert "<html" in full and 'id="run-status"' in full and "Recent events" in full
        assert "<html" not in polled and f"<code>{run_id}</code>" in polled and "Recent events" in polled
        assert 'id="run-status"' not in polled  # the part itself, swapped into the page's section


@pytest.mark.parametrize("action", ["approve", "reject", "reconcile", "resume", "cancel"])
def test_an_object_of_another_tenant_is_not_found_for_every_action(support, other_tenant, action):
    url, form = _action_targets(other_tenant)[action]
    assert support.post(url, form).status_code == 404
    page = url.rsplit("/", 2)[0] + "/"
    assert support.get(page).status_code == 404
    assert not _audit() and not AgentEvent.objects.filter(actor="user:support").exists()


def test_a_lookup_of_another_tenants_operation_is_not_found(support, other_tenant):
    op = _unknown_operation(other_tenant)
    assert support.post(reverse("console:support_operation_lookup", args=[op.pk])).status_code == 404
    assert not AuditEntry.objects.filter(action="lookup").exists()


@pytest.mark.parametrize("note", ["   ", "\x01\x02", "\u200b\u200b"])  # invisible
@pytest.mark.parametrize("action", ["approve", "reject", "reconcile", "resume", "cancel"])
def test_a_missing_note_is_a_form_error_and_changes_nothing(support, tenant, action, note):
    url, form = _action_targets(tenant)[action]
    before = {r.run_id: r.state_revision for r in AgentRun.objects.all()}
    response = support.post(url, {**form, "note": note})
    assert response.status_code == 422
    assert "This field is required." in response.content.decode()
    assert {r.run_id: r.state_revision for r in AgentRun.objects.all()} == before
    assert not _audit()


# --- approvals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "status"), [("approve", "approved"), ("reject", "rejected")])
def test_a_decision_is_made_audited_and_written_to_the_run(support, tenant, action, status):
    approval = _approval(tenant)
    url = reverse(f"console:support_approval_{action}", args=[approval.approval_id])
    response = support.post(url, {"note": f"{action}d after a call"})
    assert response.status_code == 302
    assert response["Location"] == reverse("console:support_approval", args=[approval.approval_id])
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.note) == (
        status,
        "user:support",
        f"{action}d after a call",
    )
    event = _last_event(approval.run_id)
    assert (event.event_type, event.actor, event.payload["note"]) == (
        f"approval_{status}",
        "user:support",
        f"{action}d after a call",
    )
    [entry] = _audit()
    assert (entry.action, entry.actor, entry.tenant_id, entry.target_type, entry.target_id, entry.note) == (
        action,
        "user:support",
        tenant.tenant_id,
        "approval",
        str(approval.approval_id),
        f"{action}d after a call",
    )
    page = support.get(response["Location"]).content.decode()
    assert status in page and "nothing to decide" in page


def test_approving_an_expired_approval_shows_the_services_message_and_audits_nothing(support, tenant):
    approval = _approval(tenant)
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(minutes=5))
    inbox = support.get(reverse("console:support_inbox")).content.decode()
    assert "expired 5 min ago" in inbox
    response = support.post(
        reverse("console:support_approval_approve", args=[approval.approval_id]), {"note": "ok"}
    )
    assert response.status_code == 409
    assert "expired at" in response.content.decode() and "asks for a new one" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "expired"  # the service records the expiry itself
    assert not _audit()


def test_deciding_twice_is_refused(support, tenant):
    approval = _approval(tenant)
    url = reverse("console:support_approval_approve", args=[approval.approval_id])
    assert support.post(url, {"note": "ok"}).status_code == 302
    again = support.post(url, {"note": "again"})
    assert again.status_code == 409 and "is approved" in again.content.decode()
    assert len(_audit()) == 1


# --- operations ----------------------------------------------------------------------------------


def test_reconciling_as_applied_settles_the_operation_and_requests_a_resume(support, tenant):
    url, form = _action_targets(tenant)["reconcile"]
    op = ToolOperation.objects.get()
    response = support.post(url, form)
    assert response.status_code == 302
    op.refresh_from_db()
    assert (op.status, op.external_ref) == ("succeeded", "rf_9")
    run = AgentRun.objects.get(run_id=op.run_id)
    assert run.status == "suspended" and run.resume_requested_by == "user:support"
    event = _last_event(op.run_id)
    assert (event.event_type, event.actor, event.payload["outcome"], event.payload["note"]) == (
        "operation_reconciled",
        "user:support",
        "applied",
        "PSP shows it",
    )
    [entry] = _audit()
    assert (entry.action, entry.target_type, entry.target_id, entry.tenant_id, entry.note) == (
        "reconcile",
        "operation",
        str(op.pk),  # by number: the operation id can embed a subject's id (never erasable here)
        tenant.tenant_id,
        "PSP shows it",
    )
    assert entry.details["external_ref"] == "rf_9" and entry.details["outcome"] == "applied"


def test_confirming_not_applied_without_resume_allows_one_retry_later(support, tenant):
    op = _unknown_operation(tenant)
    url = reverse("console:support_operation_reconcile", args=[op.pk])
    assert support.post(url, {"note": "no such payment", "outcome": "not_applied"}).status_code == 302
    op.refresh_from_db()
    run = AgentRun.objects.get(run_id=op.run_id)
    assert op.status == "prepared" and run.resume_requested_at is None
    assert [e.action for e in _audit()] == ["reconcile"]


def test_an_applied_outcome_needs_the_external_reference(support, tenant):
    op = _unknown_operation(tenant)
    url = reverse("console:support_operation_reconcile", args=[op.pk])
    response = support.post(url, {"note": "PSP shows it", "outcome": "applied", "external_ref": " "})
    assert response.status_code == 422 and "needs the external reference" in response.content.decode()
    assert ToolOperation.objects.get(pk=op.pk).status == "unknown" and not _audit()


def test_reconciling_an_operation_of_a_running_run_is_refused(support, tenant):
    op = _unknown_operation(tenant, suspend=False)
    url = reverse("console:support_operation_reconcile", args=[op.pk])
    form = {"note": "x", "outcome": "applied", "external_ref": "rf_1", "external_ref_again": "rf_1"}
    response = support.post(url, form)
    assert response.status_code == 409
    assert "operations are reconciled on suspended or finished runs" in response.content.decode()
    assert ToolOperation.objects.get(pk=op.pk).status == "unknown" and not _audit()


def test_looking_up_again_records_what_the_unavailable_lookup_said(support, tenant):
    op = _unknown_operation(tenant)
    response = support.post(reverse("console:support_operation_lookup", args=[op.pk]))
    assert response.status_code == 302
    [entry] = AuditEntry.objects.filter(action="lookup")
    assert (entry.target_type, entry.target_id, entry.tenant_id) == (
        "operation",
        str(op.pk),
        tenant.tenant_id,
    )
    assert entry.details["authoritative"] is False and entry.details["tool"] == "payments.refund"
    assert entry.details["unavailable"] is True
    # Never the answer's body: it can echo the key or the customer's data into an append-only log.
    assert "result" not in entry.details
    page = support.get(response["Location"]).content.decode()
    # A lookup that got no answer says so, apart from an answer that proves nothing.
    assert "the lookup failed" in page and "did not answer" in page and "not authoritative" not in page
    assert ToolOperation.objects.get(pk=op.pk).status == "unknown"  # a lookup settles nothing by itself


def test_an_authoritative_applied_lookup_prefills_the_reference(support, tenant, monkeypatch) -> None:
    op = _unknown_operation(tenant)
    asked: list[str] = []

    def lookup(key: str) -> ToolLookup:
        asked.append(key)
        return ToolLookup(
            authoritative=True, applied=True, external_ref="rf_found", result={"refund_id": "rf_found"}
        )

    contract = ToolContract(name="payments.refund", version="payments.v1", lookup=lookup)
    monkeypatch.setattr("console.views.support_operations.registry.tool", lambda name: contract)
    response = support.post(reverse("console:support_operation_lookup", args=[op.pk]), follow=True)
    page = response.content.decode()
    assert asked == ["refund:o-1"]
    assert 'value="rf_found"' in page and 'value="applied" id="id_outcome_0" required checked' in page


# --- runs ----------------------------------------------------------------------------------------


def test_resuming_a_refused_run_is_audited_and_written_to_the_run(support, tenant):
    run = _refused_run(tenant)
    page = support.get(reverse("console:support_run", args=[run.run_id])).content.decode()
    assert "Only an engineer can fix this" in page and "changed outside Keeper" in page
    assert "state_digest_mismatch" not in page.split('id="recent-events"')[0]  # words, not codes
    assert 'action="{}"'.format(reverse("console:support_run_resume", args=[run.run_id])) not in page
    response = support.post(
        reverse("console:support_run_resume", args=[run.run_id]), {"note": "state checked"}
    )
    assert response.status_code == 302
    event = _last_event(run.run_id)
    assert (event.event_type, event.actor, event.payload["note"]) == (
        "resume_requested",
        "user:support",
        "state checked",
    )
    [entry] = _audit()
    assert (entry.action, entry.target_type, entry.target_id, entry.tenant_id) == (
        "resume",
        "run",
        str(run.run_id),
        tenant.tenant_id,
    )


def test_cancelling_stops_the_run_and_cancelling_again_is_refused(support, tenant):
    run = _suspended_run(tenant, reason="manual_review")
    url = reverse("console:support_run_cancel", args=[run.run_id])
    assert support.post(url, {"note": "customer withdrew"}).status_code == 302
    run.refresh_from_db()
    event = _last_event(run.run_id)
    assert run.status == "cancelled" and (event.event_type, event.actor) == ("run_cancelled", "user:support")
    again = support.post(url, {"note": "again"})
    assert again.status_code == 409 and "needs it to be running or suspended" in again.content.decode()
    resumed = support.post(reverse("console:support_run_resume", args=[run.run_id]), {"note": "go"})
    assert resumed.status_code == 409
    assert [e.action for e in _audit()] == ["cancel"]


# --- hostile content -----------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = HOSTILE
    for i in range(levels):
        value = {f"k{i}": [value, RTL]}
    return value


def test_hostile_content_renders_escaped_everywhere(support, tenant):
    request = {"order_id": HOSTILE + RTL, "amount_minor": _deep(120), "currency": "<b>EUR</b>", "memo": LONG}
    approval = _approval(
        tenant,
        request=request,
        reasons=[HOSTILE, RTL, LONG, {"nested": _deep(5)}],
        digest='sha256:"><img src=x onerror=alert(1)>',
    )
    op = _unknown_operation(tenant, note=HOSTILE + RTL)
    run = _suspended_run(tenant, reason="manual_review", detail=HOSTILE + LONG)
    support.post(reverse("console:support_run_resume", args=[run.run_id]), {"note": HOSTILE + RTL})
    support.post(
        reverse("console:support_approval_reject", args=[approval.approval_id]), {"note": HOSTILE + RTL}
    )
    pages = [
        reverse("console:support_inbox"),
        reverse("console:support_approval", args=[approval.approval_id]),
        reverse("console:support_operation", args=[op.pk]),
        reverse("console:support_run", args=[run.run_id]),
        reverse("console:support_run", args=[approval.run_id]),
    ]
    for url in pages:
        response = support.get(url)
        body = response.content.decode()
        assert response.status_code == 200, url
        assert "<script>alert" not in body and "<img src=x" not in body and "<b>EUR" not in body, url
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body, url
    approval_page = support.get(pages[1]).content.decode()
    assert RTL in approval_page and LONG in approval_page and "{…}" in approval_page


def test_amounts_show_exactly_at_any_size():
    """A 30-digit amount is not rounded to Decimal's 28 digits."""
    from console.display import money_major

    assert (
        money_major(123456789012345678901234567890, "EUR") == "1,234,567,890,123,456,789,012,345,678.90 EUR"
    )
    assert money_major(2500, "EUR") == "25.00 EUR" and money_major(-5, "EUR") == "-0.05 EUR"
    assert money_major(1234, "JPY") == "1,234 JPY" and money_major(12345, "KWD") == "12.345 KWD"
