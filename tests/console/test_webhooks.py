"""The engineer's webhook page: subscriptions and deliveries with attempts; subscribe and delete are
role-checked and audited, bad input is a form error with nothing stored."""

from __future__ import annotations

import pytest

from console.models import AuditEntry
from core.tenancy import tenant_bind
from runs.engine.runs import run_fail, run_start
from runs.webhooks.delivery import webhooks_deliver_due
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from runs.webhooks.services import webhook_subscription_create

pytestmark = pytest.mark.django_db


def test_an_engineer_subscribes_sees_the_secret_once_and_the_act_is_audited(as_role, tenant):
    client = as_role("engineer")
    response = client.post(
        "/webhooks/subscribe/",
        {"tenant": "acme", "url": "https://acme.example/h", "event_types": ["run.failed", "run.completed"]},
    )
    assert response.status_code == 201, response.content
    subscription = WebhookSubscription.objects.get()
    assert subscription.secret in response.content.decode()
    assert subscription.secret not in client.get("/webhooks/").content.decode()  # once only
    [entry] = AuditEntry.objects.filter(action="webhook_create")
    assert (entry.actor, entry.target_id, entry.tenant_id) == (
        "user:engineer",
        str(subscription.id),
        tenant.tenant_id,
    )
    assert subscription.secret not in str(entry.details)


def test_a_url_subscribed_twice_is_a_form_error(as_role, tenant):
    client = as_role("engineer")
    data = {"tenant": "acme", "url": "https://acme.example/h", "event_types": ["run.failed"]}
    assert client.post("/webhooks/subscribe/", data).status_code == 201
    again = client.post("/webhooks/subscribe/", data)
    assert again.status_code == 422 and "already subscribed" in again.content.decode()
    assert WebhookSubscription.objects.count() == 1
    assert AuditEntry.objects.filter(action="webhook_create").count() == 1


@pytest.mark.parametrize(
    "data",
    [
        {"tenant": "acme", "url": "not a url", "event_types": ["run.failed"]},
        {"tenant": "acme", "url": "http://acme.example/h", "event_types": ["run.failed"]},
        {"tenant": "acme", "url": "https://acme.example/h", "event_types": ["run.exploded"]},
        {"tenant": "globex", "url": "https://acme.example/h", "event_types": ["run.failed"]},
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_stored_or_audited(as_role, other_tenant, data):
    response = as_role("engineer").post("/webhooks/subscribe/", data)
    assert response.status_code == 422  # as every console form error (not 400)
    assert 'class="errorlist' in response.content.decode() or 'role="alert"' in response.content.decode()
    assert not WebhookSubscription.objects.exists() and not AuditEntry.objects.exists()


def test_deliveries_are_listed_with_attempts_and_a_delete_is_audited(as_role, tenant, settings):
    settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = True  # nobody listens on 127.0.0.1:9
    created = webhook_subscription_create(
        tenant=tenant, url="https://127.0.0.1:9/h", event_types=["run.failed"], actor="test"
    )
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
    run_fail(run_id=run.run_id, actor="test", code="x")
    webhooks_deliver_due()  # nobody listens: one failed attempt, a next try
    client = as_role("engineer")
    page = client.get("/webhooks/").content.decode()
    delivery = WebhookDelivery.objects.get()
    assert str(delivery.event_id) in page and str(run.run_id) in page and "no answer" in page
    assert delivery.status == "pending" and delivery.attempts == 1

    response = client.post(f"/webhooks/{created.subscription.id}/delete/")
    assert response.status_code == 302
    # Posted again (a double click, another tab): said on the page, not a 500.
    again = client.post(f"/webhooks/{created.subscription.id}/delete/")
    assert again.status_code == 404 and 'role="alert"' in again.content.decode()
    delivery.refresh_from_db()
    assert delivery.status == "cancelled"
    assert (
        AuditEntry.objects.filter(action="webhook_delete", target_id=str(created.subscription.id)).count()
        == 1
    )


def test_another_tenants_subscription_cannot_be_deleted(as_role, other_tenant):
    with tenant_bind(other_tenant.tenant_id):
        theirs = webhook_subscription_create(
            tenant=other_tenant, url="https://globex.example/h", event_types=["run.failed"], actor="test"
        ).subscription
    response = as_role("engineer").post(f"/webhooks/{theirs.id}/delete/")
    assert response.status_code == 404
    with tenant_bind(other_tenant.tenant_id):
        assert WebhookSubscription.objects.get(id=theirs.id).deleted_at is None
    assert not AuditEntry.objects.exists()
