"""The engineer screens through the Django test client: run list filters and keyset pages, the run
page and its parts, actions with their audit entries, bulk actions, queue health, tenant isolation,
and hostile content rendered escaped."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from console import urls_engineer
from console.models import AuditEntry
from console.views import engineer_bulk, engineer_queue
from core.digests import json_digest
from core.ids import short_id
from core.tenancy import tenant_bind, tenant_ensure, tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.conversations.compaction.services import summary_create
from runs.conversations.compaction.tokens import token_counter
from runs.engine.runs import run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Summary, ToolOperation
from tests.console.conftest import make_user

pytestmark = pytest.mark.django_db
HOSTILE = "<script>alert(1)</script>"


def start(tenant, n=3, key=None):
    return run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test", idempotency_key=key
    ).run


def finish(run):
    for _ in range(30):
        if run_advance(run_id=run.run_id, worker_id="w-test").status != "running":
            break
    with tenant_bind(run.tenant_id):  # row-level security: maybe not the test's own tenant
        run.refresh_from_db()
    return run


def suspended(tenant):
    run = start(tenant)
    return run_suspend(run_id=run.run_id, actor="test", reason="needs_look", detail="look at it")


def add_event(run, event_type, payload, *, state=None, actor="test"):
    """An event written straight to the tables (to plant hostile content the services would refuse)."""
    run.refresh_from_db()
    seq, digest = run.state_revision + 1, json_digest(state) if state is not None else run.state_digest
    AgentEvent.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        run_created_at=run.created_at,
        seq=seq,
        event_type=event_type,
        payload=payload,
        actor=actor,
        state_revision=seq,
        state_digest=digest,
        state=state,
        next_step=run.next_step,
        created_at=timezone.now(),
    )
    AgentRun.objects.filter(run_id=run.run_id).update(
        state_revision=seq,
        state_digest=digest,
        updated_at=timezone.now(),
        **({"state": state} if state else {}),
    )
    return seq


def detail(run, name="run_detail"):
    return reverse(f"console:{name}", args=[run.run_id])


# --- the run list ---------------------------------------------------------------------------------


def test_the_list_tells_runs_started_together_apart_by_their_short_ids(as_role, tenant):
    # A run id starts with its start time (core/ids.py), so runs started within a minute share their
    # first 8 hex digits: the list shows the last 8, which are random.
    first, second = start(tenant), start(tenant)
    page = as_role("engineer").get("/runs/").content.decode()
    shown = {short_id(run.run_id) for run in (first, second)}
    assert len(shown) == 2 and all(f"<code>{short}</code>" in page for short in shown)


def test_the_list_shows_only_the_users_tenants_and_filters_them(as_role, tenant, other_tenant):
    mine, stopped, theirs = start(tenant), suspended(tenant), start(other_tenant)
    client = as_role("engineer")
    page = client.get("/runs/").content.decode()
    assert str(mine.run_id) in page and str(stopped.run_id) in page
    assert str(theirs.run_id) not in page
    page = client.get(
        "/runs/", {"status": "suspended", "reason": "needs_look", "tenant": "acme"}
    ).content.decode()
    assert str(stopped.run_id) in page and str(mine.run_id) not in page
    page = client.get("/runs/", {"workflow": "demo.countdown", "version": "1", "since": "2000-01-01T00:00"})
    assert str(mine.run_id) in page.content.decode()
    assert str(mine.run_id) not in client.get("/runs/", {"until": "2000-01-01 00:00"}).content.decode()
    assert 'value="globex"' not in page.content.decode()  # the tenant filter offers only the user's tenants


@pytest.mark.parametrize(
    "params",
    [
        {"status": "exploded"},
        {"since": "not a date"},
        {"tenant": "globex"},
        {"limit": "0"},
        {"cursor": "2026-01-01T00:00:00+00:00"},
        {"sort": "sideways"},
        {"since": "2026-02-01", "until": "2026-01-01"},
    ],
)
def test_an_invalid_filter_shows_an_error_with_422(as_role, tenant, other_tenant, params):
    response = as_role("engineer").get("/runs/", params)
    assert response.status_code == 422
    assert b"The filter is not valid" in response.content


def test_search_finds_a_run_by_exact_id_or_idempotency_key(as_role, tenant):
    keyed, other = start(tenant, key="order-77"), start(tenant)
    client = as_role("engineer")
    page = client.get("/runs/", {"q": "order-77"}).content.decode()
    assert str(keyed.run_id) in page and str(other.run_id) not in page
    page = client.get("/runs/", {"q": str(other.run_id)}).content.decode()
    assert str(other.run_id) in page and str(keyed.run_id) not in page
    assert "No run matches" in client.get("/runs/", {"q": "order-7"}).content.decode()  # exact only


@pytest.mark.parametrize("tenants", [1, 2])
def test_keyset_pages_walk_every_run_once_newest_first_without_counting(
    client, tenant, other_tenant, tenants
) -> None:
    mine = (tenant, other_tenant)[:tenants]
    created = {start(mine[i % tenants]).run_id for i in range(30)}
    hidden = start(tenant_ensure(slug="initech"))
    client.force_login(make_user("eng-keyset", "engineer", tenants=mine))
    seen: list[str] = []
    url = "/runs/?limit=7"
    for _ in range(10):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
        seen += [str(run.run_id) for run, _, _ in response.context["rows"]]
        older = re.search(r'class="older" href="([^"]+)"', response.content.decode())
        if older is None:
            break
        url = older.group(1).replace("&amp;", "&")
        assert "cursor=" in url and "limit=7" in url
    assert len(seen) == 30 and set(seen) == {str(r) for r in created} and str(hidden.run_id) not in seen
    stamps: list[tuple[UUID, datetime]] = []
    for each in mine:  # row-level security: one tenant at a time
        with tenant_bind(each.tenant_id):
            stamps += AgentRun.objects.filter(run_id__in=seen).values_list("run_id", "updated_at")
    order = [str(r) for r, _ in sorted(stamps, key=lambda row: (row[1], str(row[0])), reverse=True)]
    assert seen == order
    fragment = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-table").content.decode()
    assert "<html" not in fragment and "<table" in fragment


# --- tenancy and roles ----------------------------------------------------------------------------


def test_every_engineer_url_needs_the_engineer_role(as_role, tenant):
    for pattern in urls_engineer.urlpatterns:
        assert pattern.callback.required_roles == ("engineer",), pattern.name
    run = start(tenant)
    client = as_role("support")
    assert client.get("/runs/").status_code == 403
    assert client.get(detail(run)).status_code == 403
    assert client.post(detail(run, "run_cancel")).status_code == 403


def test_another_tenants_run_is_404_on_every_url_and_nothing_is_recorded(as_role, other_tenant):
    run = finish(start(other_tenant))
    client = as_role("engineer")
    run_urls = [p for p in urls_engineer.urlpatterns if "run_id" in str(p.pattern)]
    # with LangGraph's page and its fork, history.json, the live poll, the workspace, a signal, a query,
    # and a merge's form, page and abandon
    assert len(run_urls) == 20
    for pattern in run_urls:
        kwargs = {
            "run_id": run.run_id,
            **({"summary_id": uuid4()} if "summary_id" in str(pattern.pattern) else {}),
            **({"merge_id": uuid4()} if "merge_id" in str(pattern.pattern) else {}),
        }
        url = reverse(f"console:{pattern.name}", kwargs=kwargs)
        data = {"at_seq": 2, "note": "x", "a": 1, "b": 2, "rev": 1, "state_digest": "sha256:x"}
        assert client.get(url, data).status_code in (404, 405), url
        assert client.post(url, data).status_code in (404, 405), url
        assert 404 in (client.get(url, data).status_code, client.post(url, data).status_code), url
    assert not AuditEntry.objects.filter(target_type="run").exists()
    assert "data-run=" not in client.get("/runs/", {"q": str(run.run_id)}).content.decode()


# --- the run page ---------------------------------------------------------------------------------


def test_the_run_page_shows_lease_timeline_events_operations_summaries_and_snapshots(as_role, tenant):
    run = finish(start(tenant, n=3))
    events = list(AgentEvent.objects.filter(run=run).order_by("seq"))
    summary_create(run=run, events=events[:3], counter=token_counter("gpt-4"))
    with tenant_scope(tenant.tenant_id):
        RetrievalSnapshot.objects.create(
            snapshot_id="rs_" + "a" * 32,
            tenant=tenant,
            run_id=run.run_id,
            query_digest="sha256:q",
            index_version="v1",
            acl_principal=f"tenant:{tenant.tenant_id}/user:ann",
            k=3,
            hits=[
                {
                    "document_id": "policy-42",
                    "source_uri": "s3://docs/policy-42",
                    "source_version": "etag-7",
                    "chunk_id": "policy-42:p1:c0",
                    "content_digest": "sha256:abc",
                    "retrieved_at": "now",
                    "score": 0.5,
                }
            ],
        )
    ToolOperation.objects.create(
        operation_id="refund:o-1",
        tenant=tenant,
        run=run,
        step_id="refund",
        tool_name="payments.refund",
        tool_contract_version="1",
        request_digest="sha256:r",
        status="unknown",
        attempts=1,
        history=[
            {"status": "prepared", "at": "t0", "by": "w1", "note": ""},
            {"status": "unknown", "at": "t1", "by": "w1", "note": "timeout after send"},
        ],
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    page = as_role("engineer").get(detail(run)).content.decode()
    assert 'id="lease"' in page and "epoch" in page
    assert "refund:o-1" in page and "timeout after send" in page and "<strong>prepared</strong>" in page
    assert '<svg class="timeline"' in page and "<title>#" in page and "completed" in page
    assert page.count('<tr id="seq-') == run.state_revision
    assert page.count("?fork_seq=") == run.state_revision  # each event offers a fork or a rewind
    assert "events 1–3" in page and "check</a>" in page
    assert "policy-42:p1:c0" in page and "etag-7" in page and "0.5000" in page


def test_a_lease_take_over_is_marked_on_the_timeline(as_role, tenant):
    from runs.kernel import apply
    from runs.kernel import moves as m

    run = start(tenant)
    assert (
        apply(
            m.LeaseTaken(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                owner="w-crashed",
                ttl=0.01,
            )
        )
        is not None
    )
    import time

    time.sleep(0.05)
    run_advance(run_id=run.run_id, worker_id="w-next")
    page = as_role("engineer").get(detail(run)).content.decode()
    assert 'class="mark mark-takeover"' in page and "(lease_takeover)" in page


def test_the_events_table_is_paged_by_seq_and_never_loads_the_whole_run(as_role, tenant):
    run = start(tenant)
    AgentEvent.objects.bulk_create(
        AgentEvent(
            run=run,
            tenant_id=run.tenant_id,
            seq=seq,
            event_type="user_message",
            payload={"text": f"m{seq}"},
            actor="user:x",
            state_revision=seq,
            state_digest=run.state_digest,
            created_at=timezone.now(),
            run_created_at=run.created_at,
        )
        for seq in range(2, 1002)
    )
    AgentRun.objects.filter(run_id=run.run_id).update(state_revision=1001)
    client = as_role("engineer")
    page = client.get(detail(run)).content.decode()
    assert page.count('<tr id="seq-') == 200 and 'id="seq-200"' in page and 'id="seq-201"' not in page
    assert "after_seq=200" in page
    fragment = client.get(detail(run), {"after_seq": 990}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="events")
    html = fragment.content.decode()
    assert "<html" not in html and html.count('<tr id="seq-') == 11 and 'id="seq-1001"' in html


def test_state_at_a_revision_and_a_diff_of_two(as_role, tenant):
    run = finish(start(tenant, n=3))
    client = as_role("engineer")
    state = client.get(detail(run, "run_state"), {"rev": 2})
    assert state.status_code == 200 and "the stored state matches it" in state.content.decode()
    diff = client.get(detail(run, "run_diff"), {"a": 2, "b": 3}).content.decode()
    assert "$.remaining" in diff and 'class="diff-del"' in diff and 'class="diff-add"' in diff
    assert "$.ticks[0]" in diff
    panel = client.get(
        detail(run, "run_diff"), {"a": 1, "b": 2}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="revision-panel"
    ).content.decode()
    assert "<html" not in panel and "added" in panel
    for params in ({"a": 0, "b": 2}, {"a": "x", "b": 2}, {"a": 1, "b": 999}):
        bad = client.get(detail(run, "run_diff"), params)
        assert bad.status_code == 422 and b"must be" in bad.content
    assert client.get(detail(run, "run_state"), {"rev": "nope"}).status_code == 422


def test_a_summary_check_passes_and_a_tampered_one_fails(as_role, tenant):
    run = finish(start(tenant, n=2))
    events = list(AgentEvent.objects.filter(run=run).order_by("seq"))
    good = summary_create(run=run, events=events[:2], counter=token_counter("gpt-4"))
    bad = summary_create(run=run, events=events[2:4], counter=token_counter("gpt-4"))
    Summary.objects.filter(pk=bad.pk).update(source_digest="sha256:forged")
    client = as_role("engineer")
    url = reverse("console:run_summary_check", args=[run.run_id, good.summary_id])
    assert "digest check passes" in client.get(url).content.decode()
    url = reverse("console:run_summary_check", args=[run.run_id, bad.summary_id])
    cell = client.get(
        url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"summary-{bad.summary_id}"
    ).content.decode()
    assert "digest mismatch" in cell and "<html" not in cell
    other = finish(start(tenant, n=1))
    assert (
        client.get(reverse("console:run_summary_check", args=[other.run_id, good.summary_id])).status_code
        == 404
    )


# --- actions --------------------------------------------------------------------------------------


def audit_for(run):
    return list(AuditEntry.objects.filter(target_type="run", target_id=str(run.run_id)))


def test_resume_and_cancel_write_one_audit_entry_and_a_run_event(as_role, tenant):
    run = suspended(tenant)
    client = as_role("engineer")
    response = client.post(detail(run, "run_resume"), {"note": "checked the order"})
    assert response.status_code == 302 and response["Location"] == detail(run)
    [entry] = audit_for(run)
    assert (entry.action, entry.actor, entry.tenant_id, entry.note) == (
        "resume",
        "user:engineer",
        tenant.tenant_id,
        "checked the order",
    )
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (event.event_type, event.actor, event.payload["note"]) == (
        "resume_requested",
        "user:engineer",
        "checked the order",
    )
    assert client.post(detail(run, "run_cancel"), {"note": "give up", "confirm": "yes"}).status_code == 302
    assert [e.action for e in audit_for(run)] == ["cancel", "resume"]
    assert AgentRun.objects.get(run_id=run.run_id).status == "cancelled"


def test_a_refused_action_shows_the_reason_with_a_4xx_and_records_nothing(as_role, tenant):
    run = finish(start(tenant, n=1))
    client = as_role("engineer")
    for name in ("run_resume", "run_cancel", "run_redispatch"):
        response = client.post(detail(run, name), {"note": HOSTILE, "confirm": "yes"})
        assert response.status_code == 409, name
        assert "refused" in response.content.decode() and HOSTILE not in response.content.decode()
    response = client.post(detail(run, "run_fork"), {"at_seq": 999, "note": "x"})
    assert response.status_code == 422 and "has no event 999" in response.content.decode()
    assert client.post(detail(run, "run_fork"), {"at_seq": "", "note": "x"}).status_code == 422
    assert client.get(detail(run, "run_resume")).status_code == 405
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(get_user_model().objects.get(username="engineer"))
    assert guarded.post(detail(suspended(tenant), "run_resume"), {"note": "no token"}).status_code == 403
    assert audit_for(run) == [] and not AuditEntry.objects.filter(target_type="run").exists()


def test_redispatch_fork_and_rewind_are_audited(as_role, tenant):
    running = start(tenant)
    client = as_role("engineer")
    assert client.post(detail(running, "run_redispatch"), {"note": "stuck?"}).status_code == 302
    assert [e.action for e in audit_for(running)] == ["redispatch"]
    done = finish(start(tenant, n=3))
    response = client.post(detail(done, "run_fork"), {"at_seq": 3, "note": "try again", "start": "on"})
    child = AgentRun.objects.get(parent_run=done, fork_seq=3)
    assert response["Location"] == detail(child)
    assert AgentEvent.objects.get(run=child, seq=1).actor == "user:engineer"
    response = client.post(detail(done, "run_rewind"), {"at_seq": 2, "note": "wrong turn", "confirm": "yes"})
    done.refresh_from_db()
    assert done.superseded_by_id is not None and response["Location"] == detail(done.superseded_by)
    entries = audit_for(done)
    assert [e.action for e in entries] == ["rewind", "fork"]
    assert entries[0].details == {"to_seq": 2} and entries[1].details == {"at_seq": 3}
    assert AgentEvent.objects.filter(run=done, event_type="run_superseded", actor="user:engineer").exists()


def test_a_fork_or_rewind_form_sent_twice_makes_one_run_and_one_audit_entry(as_role, tenant):
    """A double click on Fork made two forks (and two audit entries)."""
    done = finish(start(tenant, n=3))
    client = as_role("engineer")
    page = client.get(detail(done))
    token = page.context["request_token"]
    assert f'name="request_token" value="{token}"' in page.content.decode()
    form = {"at_seq": 3, "note": "try again", "start": "on", "request_token": token}
    first, again = (client.post(detail(done, "run_fork"), form) for _ in range(2))
    child = AgentRun.objects.get(parent_run=done, fork_seq=3)
    assert first["Location"] == again["Location"] == detail(child)
    assert "this form was sent before" in client.get(again["Location"]).content.decode()
    assert client.get(detail(done)).context["request_token"] != token  # a new page: a new fork
    confirm = client.post(detail(done, "run_rewind"), {"at_seq": 2, "note": "wrong turn"})
    rewind_token = confirm.context["request_token"]
    assert f'name="request_token" value="{rewind_token}"' in confirm.content.decode()
    form = {"at_seq": 2, "note": "wrong turn", "confirm": "yes", "request_token": rewind_token}
    first, again = (client.post(detail(done, "run_rewind"), form) for _ in range(2))
    done.refresh_from_db()
    assert first["Location"] == again["Location"] == detail(done.superseded_by)
    assert [e.action for e in audit_for(done)] == ["rewind", "fork"]
    assert AgentRun.objects.filter(parent_run=done).count() == 2


# --- bulk -----------------------------------------------------------------------------------------


def test_bulk_resume_dry_run_then_confirm_changes_only_suspended_runs(as_role, tenant, other_tenant):
    stopped = [suspended(tenant) for _ in range(3)]
    done = [finish(start(tenant, n=1)) for _ in range(2)]
    suspended(other_tenant)  # never counted, never touched
    client = as_role("engineer")
    dry = client.get("/runs/bulk/", {"action": "resume", "workflow": "demo.countdown"})
    page = dry.content.decode()
    assert dry.status_code == 200
    assert "<strong>5</strong> runs match" in page and "<strong>3</strong> would change" in page
    assert "<strong>2</strong> would be skipped" in page
    assert all(str(r.run_id) in page for r in stopped) and not any(str(r.run_id) in page for r in done)
    assert not AuditEntry.objects.exists()
    token = dry.context["token"]
    form = {"action": "resume", "workflow": "demo.countdown", "token": token, "note": "bulk after outage"}
    refused = client.post("/runs/bulk/", form)  # no confirmation ticked
    assert refused.status_code == 422 and not AuditEntry.objects.exists()
    forged = client.post("/runs/bulk/", {**form, "workflow": "", "confirm": "yes"})  # another filter
    assert forged.status_code == 422 and not AuditEntry.objects.exists()
    applied = client.post("/runs/bulk/", {**form, "confirm": "yes"})
    assert applied.status_code == 200
    assert {r.run_id for r in applied.context["changed"]} == {r.run_id for r in stopped}
    assert {r.run_id for r, _ in applied.context["skipped"]} == {r.run_id for r in done}
    assert "needs it to be suspended" in applied.content.decode()
    entries = AuditEntry.objects.filter(action="resume")
    assert entries.count() == 3 and {e.target_id for e in entries} == {str(r.run_id) for r in stopped}
    assert all(e.note == "bulk after outage" and e.tenant_id == tenant.tenant_id for e in entries)
    assert AgentEvent.objects.filter(event_type="resume_requested", actor="user:engineer").count() == 3


def test_bulk_redispatch_wakes_running_runs_and_skips_the_others(as_role, tenant):
    running, waiting, done = start(tenant), suspended(tenant), finish(start(tenant, n=1))
    client = as_role("engineer")
    dry = client.get("/runs/bulk/", {"action": "redispatch"})
    assert dry.context["matched"] == 3 and dry.context["would"] == 1
    form = {
        "action": "redispatch",
        "token": dry.context["token"],
        "confirm": "yes",
        "note": "after redis flush",
    }
    applied = client.post("/runs/bulk/", form)
    assert [r.run_id for r in applied.context["changed"]] == [running.run_id]
    reasons = dict((r.run_id, why) for r, why in applied.context["skipped"])
    assert set(reasons) == {waiting.run_id, done.run_id}
    assert "re-dispatch needs it running, or suspended with a resume request" in reasons[done.run_id]
    [entry] = AuditEntry.objects.filter(action="redispatch")
    assert entry.target_id == str(running.run_id) and entry.details["bulk"] is True


def test_a_bulk_action_over_the_cap_is_refused_with_a_clear_message(as_role, tenant, monkeypatch):
    monkeypatch.setattr(engineer_bulk, "BULK_CAP", 2)
    for _ in range(3):
        start(tenant)
    client = as_role("engineer")
    dry = client.get("/runs/bulk/", {"action": "cancel"})
    assert (
        "More than 2 runs match" in dry.content.decode() and 'id="bulk-confirm"' not in dry.content.decode()
    )
    token = engineer_bulk._token(dry.wsgi_request, "cancel", "")
    applied = client.post("/runs/bulk/", {"action": "cancel", "token": token, "confirm": "yes", "note": "x"})
    assert applied.status_code == 422 and not AuditEntry.objects.exists()
    assert client.get("/runs/bulk/", {"action": "explode"}).status_code == 422
    assert client.get("/runs/bulk/", {"action": "cancel", "status": "nope"}).status_code == 422


# --- queue health ---------------------------------------------------------------------------------


def test_queue_health_without_workers_says_so_and_shows_runs_and_leases(as_role, tenant, monkeypatch):
    monkeypatch.setattr(engineer_queue.pinger, "at", 0.0)
    stale = start(tenant)
    AgentRun.objects.filter(run_id=stale.run_id).update(
        lease_owner="w-gone", lease_expires_at=timezone.now() - timezone.timedelta(seconds=30), lease_epoch=4
    )
    waiting = start(tenant)
    finish(start(tenant, n=1))
    client = as_role("engineer")
    response = client.get("/queue/")
    page = response.content.decode()
    assert response.status_code == 200 and "No answer from workers" in page
    assert 'class="bar bar-running"' in page and "running: 2" in page and "completed: 1" in page
    assert "w-gone" in page and str(stale.run_id) in page
    assert str(waiting.run_id) in page or str(stale.run_id) in page  # the oldest runnable one
    assert 'hx-trigger="every 5s"' in page
    polled = client.get("/queue/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="queue-panel").content.decode()
    assert "<html" not in polled and 'id="queue-panel"' in polled


def test_queue_health_survives_an_unreachable_broker(as_role, tenant, monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("redis is away")

    from workers.celery import app

    monkeypatch.setattr(engineer_queue.pinger, "at", 0.0)
    monkeypatch.setattr(app.control, "inspect", unreachable)
    response = as_role("engineer").get("/queue/")
    assert response.status_code == 200 and "No answer from workers" in response.content.decode()


# --- hostile content ------------------------------------------------------------------------------


def deep(levels: int, leaf: str = HOSTILE) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": leaf}
    for _ in range(levels):
        value = {"d": value}
    return value


def test_hostile_content_in_events_and_states_renders_escaped(as_role, tenant):
    run = start(tenant)
    hostile = {
        "note": HOSTILE,
        "long": "x" * 5000,
        "rtl": "שלום עולם",
        "emoji": "🙂🚀",
        "deep": deep(200),
        "<b>key</b>": "<img src=x onerror=alert(2)>",
    }
    add_event(run, "user_message", {"text": f"{HOSTILE} שלום 🙂", "long": "y" * 5000, "deep": deep(200)})
    rev = add_event(run, "step_completed", {"note": HOSTILE}, state=hostile, actor=HOSTILE)
    add_event(
        run, "run_suspended", {"reason": "<img src=x onerror=alert(3)>"}, actor=f"{HOSTILE}{'z' * 5000}"
    )
    last = add_event(run, "step_completed", {}, state={**hostile, "deep": deep(200, leaf="שלום 🙂")})
    AgentRun.objects.filter(run_id=run.run_id).update(
        subject=HOSTILE,
        idempotency_key=HOSTILE * 100,
        status="suspended",
        suspend_reason=HOSTILE,
        suspend_detail="שלום " + HOSTILE,
    )
    client = as_role("engineer")
    pages = [
        client.get(detail(run)),
        client.get(detail(run, "run_state"), {"rev": rev}),
        client.get(detail(run, "run_diff"), {"a": 1, "b": rev}),
        client.get("/runs/"),
        client.get(detail(run, "run_diff"), {"a": rev, "b": last}),
    ]
    for response in pages:
        html = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>key" not in html
    run_page, state_page, diff_page, _, deep_diff = (p.content.decode() for p in pages)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in run_page and "שלום" in run_page and "🙂" in run_page
    assert "x" * 5000 in state_page and "the stored state matches it" in state_page
    assert "$.deep" + ".d" * 200 + ".leaf" in deep_diff and "&quot;שלום 🙂&quot;" in deep_diff
    assert "$[&quot;&lt;b&gt;key&lt;/b&gt;&quot;]" in diff_page
    assert run_page.count("</svg>") >= 1 and "&lt;script&gt;" in run_page.split('<svg class="timeline"')[1]


def test_accepting_a_changed_state_shows_both_digests_and_the_diff_needs_a_note_and_is_audited(
    as_role, tenant
):
    run = start(tenant, n=5)
    run_advance(run_id=run.run_id, worker_id="w-test")
    run_suspend(run_id=run.run_id, actor="test", reason="needs_look")
    committed = AgentEvent.objects.filter(run=run).latest("seq").state_digest
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_runs SET state = state || '{\"remaining\": 77}'::jsonb WHERE run_id = %s",
            [run.run_id],
        )
    from runs.engine.runs import run_resume

    run_resume(run_id=run.run_id, actor="test")
    run_advance(run_id=run.run_id, worker_id="w-test")
    run.refresh_from_db()
    assert run.suspend_reason == "state_digest_mismatch"
    client = as_role("engineer")
    page = client.get(detail(run)).content.decode()
    from runs.kernel.state import state_encode

    edited = state_encode(run.state).digest
    assert 'id="accept-state-form"' in page and committed in page and edited in page
    before = AgentEvent.objects.filter(run=run, state_digest=committed, state__isnull=False).latest("seq")
    diff_row = rf"<code>\$\.remaining</code>.*?<code>{before.state['remaining']}</code>.*?<code>77</code>"
    assert re.search(diff_row, page, re.S)
    url = detail(run, "run_accept_state")
    assert as_role("support").post(url, {"note": "fine", "state_digest": edited}).status_code == 403
    client = as_role("engineer")
    assert client.post(url, {"note": "", "state_digest": edited}).status_code == 422
    assert (
        client.post(url, {"note": "fine", "state_digest": committed}).status_code == 409
    )  # not what is stored
    assert (
        audit_for(run) == [] and not AgentEvent.objects.filter(run=run, event_type="state_accepted").exists()
    )
    response = client.post(url, {"note": "set by hand, ticket 9", "state_digest": edited})
    assert response.status_code == 302
    [entry] = audit_for(run)
    assert (entry.action, entry.actor, entry.note, entry.details["accepted_digest"]) == (
        "accept_state",
        "user:engineer",
        "set by hand, ticket 9",
        edited,
    )
    event = AgentEvent.objects.get(run=run, event_type="state_accepted")
    assert (event.payload["digest_before"], event.payload["digest_after"]) == (committed, edited)
