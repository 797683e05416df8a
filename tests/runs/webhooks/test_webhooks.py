"""Webhooks: the outbox row is written by the event's own statement; deliveries are signed, retried
with backoff and accepted once per event; subscriptions refuse bad input with a reason."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any

import pytest

from core.processes import ROOT
from core.tenancy import tenant_bind
from runs.engine.runs import run_fail, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentRun
from runs.kernel.state import state_encode
from runs.webhooks.delivery import webhooks_deliver_due
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from runs.webhooks.services import webhook_subscription_create
from tests.erasure.agreement import assert_registry_agrees
from tests.processes import wait_until

pytestmark = pytest.mark.django_db


def _subscribe(tenant, url, types=("run.completed", "run.failed", "run.suspended.approval")):
    return webhook_subscription_create(tenant=tenant, url=url, event_types=list(types), actor="test")


def _complete(tenant) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    for _ in range(10):
        run.refresh_from_db()
        if run.status != "running":
            break
        run_advance(run_id=run.run_id, worker_id="w-test")
    run.refresh_from_db()
    assert run.status == "completed"
    return run


def _deliver_until(predicate, *, timeout: float = 60) -> None:
    def step() -> bool:
        webhooks_deliver_due()
        return predicate()

    wait_until(step, timeout=timeout, interval=0.1, message="webhook deliveries")


def _verify(secret: str, headers: dict[str, str], body: bytes, *, tolerance: int = 300) -> bool:
    """The README's recipe, written out independently of Keeper's code."""
    timestamp = headers["Keeper-Timestamp"]
    if abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    given = [part[3:] for part in headers["Keeper-Signature"].split(",") if part.strip().startswith("v1=")]
    return any(hmac.compare_digest(expected, g.strip()) for g in given)


def _documented_verify() -> Any:
    """The `verify` function of docs/how-to/webhooks.md, run as the page prints it."""
    page = (ROOT / "docs" / "how-to" / "webhooks.md").read_text()
    [block] = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M) if "def verify(" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/how-to/webhooks.md", "exec"), namespace)
    return namespace["verify"]


def test_the_how_to_pages_verify_accepts_keepers_delivery_and_refuses_a_changed_one(
    tenant, receiver, allow_http
):
    verify = _documented_verify()
    created = _subscribe(tenant, receiver.url)
    run = _complete(tenant)
    _deliver_until(lambda: len(receiver.accepted()) == 1)
    [got] = receiver.accepted()
    assert verify(created.secret, got.headers, got.body)["run_id"] == str(run.run_id)
    for secret, body in (
        (created.secret + "x", got.body),
        (created.secret, got.body.replace(b"completed", b"failed")),
    ):
        with pytest.raises(ValueError):
            verify(secret, got.headers, body)
    stale = {**got.headers, "Keeper-Timestamp": str(int(got.headers["Keeper-Timestamp"]) - 3600)}
    with pytest.raises(ValueError, match="stale"):
        verify(created.secret, stale, got.body)


def test_a_receiver_failing_three_times_then_succeeding_accepts_each_event_exactly_once(
    tenant, receiver, allow_http
):
    receiver.fail_first = 3
    _subscribe(tenant, receiver.url)
    completed = _complete(tenant)
    failed = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 5}, actor="test").run
    run_fail(run_id=failed.run_id, actor="user:ops", code="gave_up")
    assert WebhookDelivery.objects.filter(status="pending").count() == 2

    _deliver_until(lambda: WebhookDelivery.objects.filter(status="pending").count() == 0)

    per_event = receiver.accepted_per_event()
    assert len(per_event) == 2 and set(per_event.values()) == {1}, per_event
    assert len(receiver.requests) == 8  # three refusals and one acceptance per event
    types = {r.event["run_id"]: r.event["type"] for r in receiver.accepted()}
    assert types == {str(completed.run_id): "run.completed", str(failed.run_id): "run.failed"}
    for delivery in WebhookDelivery.objects.all():
        assert delivery.status == "delivered" and delivery.attempts == 4, delivery.history
        assert [h["status_code"] for h in delivery.history] == [500, 500, 500, 200]
    # a later pass sends nothing more
    webhooks_deliver_due()
    assert len(receiver.requests) == 8


def test_the_signature_verifies_with_the_documented_recipe(tenant, receiver, allow_http):
    created = _subscribe(tenant, receiver.url)
    run = _complete(tenant)
    _deliver_until(lambda: len(receiver.accepted()) == 1)
    [got] = receiver.accepted()
    assert _verify(created.secret, got.headers, got.body)
    assert not _verify(created.secret + "x", got.headers, got.body)
    assert not _verify(created.secret, got.headers, got.body.replace(b"completed", b"failed"))
    event = got.event
    assert set(event) == {"event_id", "type", "run_id", "tenant", "occurred_at", "data"}
    assert event["event_id"] == got.headers["Keeper-Event-Id"]
    assert (event["type"], event["run_id"], event["tenant"]) == (
        "run.completed",
        str(run.run_id),
        str(tenant.tenant_id),
    )
    assert event["data"] == {"status": "completed", "reason": None, "revision": run.state_revision}


def test_the_outbox_row_is_written_by_the_events_statement_and_only_for_subscribed_types(
    tenant, other_tenant, allow_http
):
    with tenant_bind(other_tenant.tenant_id):
        _subscribe(other_tenant, "https://globex.example/hooks")  # another tenant's: never told
    only_failed = _subscribe(tenant, "https://acme.example/failed", types=["run.failed"]).subscription
    approvals = _subscribe(tenant, "https://acme.example/approvals", types=["run.suspended.approval"])
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="looked_odd")  # not a reason anyone hears of
    assert not WebhookDelivery.objects.exists()
    second = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=second.run_id, actor="test", reason="approval_required")
    [delivery] = WebhookDelivery.objects.all()
    second.refresh_from_db()
    assert (delivery.subscription_id, delivery.event_type, delivery.run_id) == (
        approvals.subscription.id,
        "run.suspended.approval",
        second.run_id,
    )
    assert delivery.data == {"status": "suspended", "reason": "approval_required", "revision": 2}

    # A commit that matches nothing (a stale revision) writes no event and no outbox row.
    third = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=third.run_id,
            tenant_id=third.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    encoded = state_encode(grant.state)

    def stale(revision: int) -> m.Failed:
        return m.Failed(
            m.Held(third.run_id, third.tenant_id, "w1", grant.epoch, revision, 1),
            encoded,
            "start",
            "x",
            "",
            {},
        )

    assert apply(stale(grant.revision + 5)) is None
    assert WebhookDelivery.objects.filter(run_id=third.run_id).count() == 0
    seq = apply(stale(grant.revision))
    [failed] = WebhookDelivery.objects.filter(run_id=third.run_id)
    assert failed.subscription_id == only_failed.id and failed.event_type == "run.failed"
    expected_id = hashlib.md5(f"{third.run_id}:{seq}".encode()).hexdigest()  # noqa: S324 - an id, not a MAC
    assert failed.event_id.hex == expected_id


def test_a_deleted_subscription_gets_nothing_more_and_its_pending_deliveries_are_cancelled(
    tenant, api, allow_http
):
    created = api.post(
        "/api/v1/webhooks/", {"url": "https://acme.example/h", "event_types": ["run.failed"]}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["secret"].startswith("whsec_") and body["event_types"] == ["run.failed"]
    listed = api.get("/api/v1/webhooks/").json()
    assert [s["id"] for s in listed] == [body["id"]] and "secret" not in listed[0]  # shown once only
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_fail(run_id=run.run_id, actor="test", code="x")
    assert api.delete(f"/api/v1/webhooks/{body['id']}").status_code == 204
    assert WebhookDelivery.objects.get().status == "cancelled"
    other = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_fail(run_id=other.run_id, actor="test", code="x")
    assert WebhookDelivery.objects.count() == 1
    assert api.get("/api/v1/webhooks/").json() == []
    again = api.delete(f"/api/v1/webhooks/{body['id']}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "webhook_not_found"


def test_a_url_subscribed_twice_is_refused_until_the_first_is_deleted(tenant, other_tenant, api, allow_http):
    """A subscribe sent twice (a retry after a timeout) made two subscriptions, and every event went
    to the endpoint twice."""
    body = {"url": "https://acme.example/h", "event_types": ["run.failed"]}
    first = api.post("/api/v1/webhooks/", body, format="json")
    again = api.post("/api/v1/webhooks/", {**body, "event_types": ["run.completed"]}, format="json")
    assert (first.status_code, again.status_code) == (201, 409)
    error = again.json()["error"]
    assert error["code"] == "webhook_url_subscribed" and error["details"]["webhook_id"] == first.json()["id"]
    assert "secret" not in again.json() and first.json()["secret"] not in again.content.decode()
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_fail(run_id=run.run_id, actor="test", code="x")
    assert WebhookDelivery.objects.filter(run_id=run.run_id).count() == 1
    # Another tenant may send to the same address; this one may again once the first is deleted.
    with tenant_bind(other_tenant.tenant_id):
        assert _subscribe(other_tenant, body["url"]).subscription.url == body["url"]
    assert api.delete(f"/api/v1/webhooks/{first.json()['id']}").status_code == 204
    assert api.post("/api/v1/webhooks/", body, format="json").status_code == 201


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "not a url", "event_types": ["run.failed"]}, "webhook_url_invalid"),
        ({"url": "ftp://acme.example/h", "event_types": ["run.failed"]}, "webhook_url_invalid"),
        ({"url": "https://:99999/h", "event_types": ["run.failed"]}, "webhook_url_invalid"),
        ({"url": "http://acme.example/h", "event_types": ["run.failed"]}, "webhook_https_required"),
        ({"url": "https://acme.example/h", "event_types": ["run.exploded"]}, "webhook_event_type_invalid"),
        ({"url": "https://acme.example/h", "event_types": []}, "webhook_event_type_invalid"),
        ({"url": "https://acme.example/h"}, None),
        ({"url": "https://acme.example/h", "event_types": "run.failed"}, None),
    ],
)
def test_bad_subscriptions_are_refused_with_a_reason_and_nothing_is_stored(tenant, api, body, code):
    response = api.post("/api/v1/webhooks/", body, format="json")
    assert 400 <= response.status_code < 500, response.content
    error = response.json()["error"]
    assert error["message"]  # a reason a person can read
    if code:
        assert error["code"] == code, response.content
    assert not WebhookSubscription.objects.exists()


def test_plain_http_is_accepted_when_allowed(tenant, api, allow_http):
    response = api.post(
        "/api/v1/webhooks/", {"url": "http://127.0.0.1:9/h", "event_types": ["run.failed"]}, format="json"
    )
    assert response.status_code == 201, response.content


def test_a_receiver_that_is_down_never_blocks_a_run_and_loses_nothing(tenant, allow_http):
    _subscribe(tenant, "http://127.0.0.1:9/nobody-listens")  # the discard port: connection refused
    run = _complete(tenant)
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get(run_id=run.run_id)
    assert delivery.status == "pending" and delivery.attempts == 1 and delivery.last_status_code is None
    assert delivery.last_error and delivery.next_attempt_at > delivery.created_at
    assert json.dumps(delivery.history)  # the attempt is recorded for the console


def test_a_finished_erasure_is_announced_with_the_request_id_and_never_the_subject(
    tenant, receiver, allow_http
):
    from erasure.services import erasure_execute, erasure_request_create

    created = _subscribe(tenant, receiver.url, types=["erasure.finished"])
    run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test", subject="cust-gone-42"
    )
    request = erasure_request_create(tenant=tenant, subject_id="cust-gone-42", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed"
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)  # idempotent: no second event
    _deliver_until(lambda: len(receiver.accepted()) == 1)
    [got] = receiver.accepted()
    assert _verify(created.secret, got.headers, got.body)
    assert got.event["type"] == "erasure.finished" and got.event["run_id"] is None
    assert got.event["data"] == {"request_id": str(request.request_id), "clean": True}
    assert b"cust-gone-42" not in got.body
    assert WebhookDelivery.objects.count() == 1


def test_a_claimed_delivery_is_held_from_other_workers_until_its_hold_passes(tenant, allow_http):
    from runs.webhooks.delivery import webhook_deliveries_claim

    _subscribe(tenant, "https://acme.example/h")
    _complete(tenant)
    [first] = webhook_deliveries_claim(tenant_id=tenant.tenant_id, limit=5)
    assert webhook_deliveries_claim(tenant_id=tenant.tenant_id, limit=5) == []  # a second worker gets nothing
    delivery = WebhookDelivery.objects.get()
    assert delivery.attempts == 1 and delivery.status == "pending"
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=delivery.created_at
    )  # the hold ran out
    [again] = webhook_deliveries_claim(tenant_id=tenant.tenant_id, limit=5)
    assert again.id == first.id and again.attempts == 2 and again.event_id == first.event_id


def test_a_claim_of_one_takes_exactly_one_row_and_leaves_the_others_untouched(tenant, allow_http):
    from runs.webhooks.delivery import webhook_deliveries_claim

    _subscribe(tenant, "https://acme.example/h")
    for _ in range(3):
        _complete(tenant)
    claimed = webhook_deliveries_claim(tenant_id=tenant.tenant_id, limit=1)
    assert len(claimed) == 1
    attempts = sorted(WebhookDelivery.objects.values_list("attempts", flat=True))
    assert attempts == [0, 0, 1]  # a LIMIT under IN (...) can be rescanned and claim more: not here


def test_a_rewind_of_a_completed_run_does_not_announce_its_completion_again(tenant, allow_http):
    from runs.engine.forks import run_rewind

    _subscribe(tenant, "https://acme.example/done", types=["run.completed"])
    run = _complete(tenant)
    assert WebhookDelivery.objects.filter(run_id=run.run_id, event_type="run.completed").count() == 1
    run_rewind(run_id=run.run_id, to_seq=2, actor="test", note="try again")
    run.refresh_from_db()
    assert run.superseded_by_id is not None and run.status == "completed"
    # The original stays completed (superseded): one delivery for it, whatever its new revision says.
    assert WebhookDelivery.objects.filter(run_id=run.run_id, event_type="run.completed").count() == 1


def test_a_failed_run_is_announced_with_its_failure_code_as_the_reason(tenant, allow_http):
    _subscribe(tenant, "https://acme.example/failed", types=["run.failed"])
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    encoded = state_encode(grant.state)
    held = m.Held(run.run_id, run.tenant_id, "w1", grant.epoch, grant.revision, 1)
    apply(m.Failed(held, encoded, "start", "gave_up", "three tries", {"code": "gave_up"}))
    [delivery] = WebhookDelivery.objects.filter(run_id=run.run_id)
    assert delivery.data["reason"] == "gave_up" and delivery.data["status"] == "failed"


def test_a_reason_code_that_carries_the_subject_leaves_the_outbox_with_the_erasure(tenant, allow_http):
    """A worker's failure code unreachable_cust6662 must not stay in a pending delivery after a
    receipt that says clean (data is declared free: the scan searches it for the id)."""
    from erasure.services import erasure_execute, erasure_request_create

    _subscribe(tenant, "https://acme.example/h")
    theirs = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test", subject="cust6662"
    ).run
    other = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    with tenant_bind(tenant.tenant_id):
        run_fail(run_id=theirs.run_id, code="unreachable_cust6662", detail="", actor="test")
        run_fail(run_id=other.run_id, code="unreachable_host", detail="", actor="test")
    assert WebhookDelivery.objects.filter(data__reason="unreachable_cust6662").count() == 1

    request = erasure_request_create(tenant=tenant, subject_id="cust6662", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    left = {place: n for place, n in done.receipt["final_scan"].items() if n}
    assert done.status == "completed" and done.receipt["clean"] is True, left
    assert_registry_agrees(done.receipt)
    assert sorted(d.data["reason"] for d in WebhookDelivery.objects.all()) == ["[erased]", "unreachable_host"]
    assert all(d.status == "pending" for d in WebhookDelivery.objects.all())  # still sent, without it


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data",  # a cloud's metadata service
        "https://127.0.0.1:8443/h",
        "https://10.0.0.7/h",
        "https://localhost/h",
        "https://[::1]/h",
        "https://[::127.0.0.1]/h",  # IPv4 inside IPv6: compatible, NAT64, 6to4
        "https://[64:ff9b::a9fe:a9fe]/h",
        "https://[2002:7f00:1::]/h",
        "https://[fe80::1%25lo]/h",  # link-local with a zone: no address to resolve, refused as written
        "https://[fe80::1%25eth9]/h",
        # Other spellings of loopback, checked as they are sent.
        "https://localhost./h",
        "https://127.1/h",
        "https://2130706433/h",
        "https://0x7f.0.0.1/h",
        "https://[::ffff:127.0.0.1]/h",
    ],
)
def test_an_endpoint_on_the_deployments_own_network_is_refused(tenant, settings, url):
    """A tenant's key cannot make Keeper POST to its own network."""
    from core.errors import InvalidInput

    settings.DEBUG, settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = False, False
    with pytest.raises(InvalidInput) as refused:
        webhook_subscription_create(tenant=tenant, url=url, event_types=["run.failed"], actor="test")
    assert refused.value.code == "webhook_url_private"
    assert not WebhookSubscription.objects.exists()


def test_a_delivery_to_an_inward_address_or_through_a_redirect_is_not_made(
    tenant, receiver, allow_http, settings
):
    """Checked again before each POST (a name can resolve elsewhere later), and a redirect is the
    receiver's answer, never followed (it could point inward)."""
    _subscribe(tenant, receiver.url)
    _complete(tenant)
    settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = False
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and "deployment's own network" in delivery.last_error
    assert receiver.accepted() == []


def test_a_redirect_is_not_followed(tenant, allow_http):
    from tests.runs.webhooks.receiver import Receiver

    target = Receiver(fail_first=0).start()
    redirecting = Receiver(fail_first=0, redirect_to=target.url).start()
    try:
        _subscribe(tenant, redirecting.url)
        _complete(tenant)
        webhooks_deliver_due()
        delivery = WebhookDelivery.objects.get()
        assert delivery.status == "pending" and delivery.last_status_code == 307
        assert target.accepted() == []
    finally:
        redirecting.stop()
        target.stop()


def test_a_name_that_resolves_inward_on_a_second_lookup_is_not_posted_to(
    tenant, receiver, settings, monkeypatch
):
    """The POST goes to the address checked: were the name looked up again to connect (urllib's own
    lookup), a DNS answer that changes (TTL 0) would reach the loopback."""
    import socket

    from runs.webhooks import services

    settings.DEBUG, settings.KEEPER_WEBHOOKS_ALLOW_HTTP, settings.KEEPER_WEBHOOKS_TIMEOUT = False, True, 1
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = iter(["93.184.216.34"] * 2 + ["127.0.0.1"] * 50)  # subscribed, checked, then connect
    real = socket.getaddrinfo

    def rebinding(host, port=None, *args, **kwargs):
        if host == "rebind.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), int(port or 0)))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(services.socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    _subscribe(tenant, f"http://rebind.example.com:{port}/hooks")
    _complete(tenant)
    webhooks_deliver_due()
    assert receiver.accepted() == [] and receiver.requests == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and delivery.last_status_code is None


def test_labels_and_deleted_endpoints_that_name_the_subject_no_longer_block_their_erasure(tenant, allow_http):
    """A revoked API key called key-for-cust-7781 and a deleted subscription to .../hook/cust-7781 do
    not keep every erasure of cust-7781 from completing (as they would if nothing could rewrite them)."""
    from core.api_auth import api_key_create, api_key_revoke
    from erasure.services import erasure_execute, erasure_request_create
    from runs.webhooks.services import webhook_subscription_delete

    live = api_key_create(tenant=tenant, name="bot-for-cust-7781", scope="write")
    revoked = api_key_create(tenant=tenant, name="key-for-cust-7781", scope="read")
    api_key_revoke(prefix=revoked.key.prefix)
    gone = _subscribe(tenant, "https://hooks.acme.example/hook/cust-7781")
    webhook_subscription_delete(subscription_id=gone.subscription.id, actor="test")
    request = erasure_request_create(tenant=tenant, subject_id="cust-7781", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt is not None
    left = {place: n for place, n in done.receipt["final_scan"].items() if n}
    assert done.status == "completed" and left == {}, left
    assert done.receipt["counts"]["labels.api_keys"] == 2
    assert_registry_agrees(done.receipt)
    # The live key still works under its erased label.
    from tests.api.conftest import key_client

    assert key_client(live.plaintext).get("/api/v1/runs/").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "https://a\x01b.example.com/",
        "https://b\x7fc.example.com/",
        "https://hooks.example.com/a b",
        "https://" + "x" * 70 + ".example.com/",
    ],
)
def test_a_url_with_a_control_character_or_no_host_name_is_refused(tenant, url):
    """Accepted, it would raise on every delivery sweep."""
    from core.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        _subscribe(tenant, url)
    assert refused.value.code == "webhook_url_invalid"


def test_one_delivery_that_cannot_be_attempted_stops_neither_the_sweep_nor_other_tenants(
    tenant, other_tenant, receiver, allow_http
):
    """A stored URL that http.client refuses (InvalidURL is no OSError) ended the sweep before the
    attempt was recorded: the delivery stayed pending past its attempts, the next tenants waited."""
    bad = _subscribe(tenant, "https://broken.example.com/h").subscription
    WebhookSubscription.objects.filter(id=bad.id).update(
        url="https://a\x01b.example.com/h"
    )  # as stored before
    _complete(tenant)
    with tenant_bind(other_tenant.tenant_id):
        _subscribe(other_tenant, receiver.url)
        _complete(other_tenant)
    webhooks_deliver_due()
    with tenant_bind(tenant.tenant_id):
        broken = WebhookDelivery.objects.get(subscription_id=bad.id)
    assert broken.attempts == 1 and broken.last_error.startswith("InvalidURL")
    assert len(receiver.accepted()) == 1


def test_spellings_of_one_endpoint_are_one_subscription(tenant):
    first = _subscribe(tenant, "https://Hooks.Example.com:443/k#part").subscription
    assert first.url == "https://hooks.example.com/k"
    for spelling in (
        "https://HOOKS.example.com/k",
        "https://hooks.example.com:443/k",
        "https://hooks.example.com/k?",
        "https://hooks.example.com/k#",
        "https://hooks.example.com./k",
        "https://hooks\uff0eexample.com/k",  # a fullwidth full stop is a dot to IDNA
        "https://hooks.example.com/%6b",  # an unreserved character percent-encoded is itself
    ):
        with pytest.raises(Exception) as refused:
            _subscribe(tenant, spelling)
        assert getattr(refused.value, "code", "") == "webhook_url_subscribed", spelling
    assert (
        _subscribe(tenant, "https://hooks.example.com:8443/k").subscription.url
        == "https://hooks.example.com:8443/k"
    )
    assert _subscribe(tenant, "https://hooks.example.com").subscription.url == "https://hooks.example.com/"
    assert (
        _subscribe(tenant, "https://höks.example.com/k").subscription.url
        == "https://xn--hks-sna.example.com/k"
    )
    with pytest.raises(Exception) as refused:
        _subscribe(tenant, "https://xn--hks-sna.example.com/k")
    assert getattr(refused.value, "code", "") == "webhook_url_subscribed"
    # An IP address in its one spelling: these are all 8.8.8.8 (not a subscription each, every event
    # coming once per spelling).
    assert _subscribe(tenant, "https://8.8.8.8/k").subscription.url == "https://8.8.8.8/k"
    for spelling in (
        "https://8.8.2056/k",
        "https://134744072/k",
        "https://0x8.0x8.0x8.0x8/k",
        "https://[::ffff:8.8.8.8]/k",
    ):
        with pytest.raises(Exception) as refused:
            _subscribe(tenant, spelling)
        assert getattr(refused.value, "code", "") == "webhook_url_subscribed", spelling
    # A path outside ASCII is sent as UTF-8 percent-encoded: stored so (it could not be delivered),
    # and that spelling is the same endpoint.
    assert _subscribe(tenant, "https://hooks.example.com/é?q=ü").subscription.url == (
        "https://hooks.example.com/%C3%A9?q=%C3%BC"
    )
    with pytest.raises(Exception) as refused:
        _subscribe(tenant, "https://hooks.example.com/%c3%a9?q=%C3%BC")
    assert getattr(refused.value, "code", "") == "webhook_url_subscribed"
