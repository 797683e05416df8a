"""A tenant's webhook subscriptions are bounded (60 from one key were taken), and a refused endpoint is
told the rule it broke, never what an internal host name resolves to."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.webhooks.delivery import webhooks_deliver_due
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from runs.webhooks.services import webhook_host_addresses, webhook_subscription_create

pytestmark = pytest.mark.django_db


def _subscribe(api, n: int):
    return api.post(
        "/api/v1/webhooks/",
        {"url": f"https://hooks.example.com/{n}", "event_types": ["run.failed"]},
        format="json",
    )


def test_a_tenant_has_at_most_its_quota_of_webhook_subscriptions(api, tenant, other_tenant, settings):
    settings.KEEPER_WEBHOOKS_PER_TENANT = 3
    made = [_subscribe(api, n) for n in range(3)]
    assert [r.status_code for r in made] == [201] * 3, made[-1].content
    refused = _subscribe(api, 3)
    assert refused.status_code == 422, refused.content
    error = refused.json()["error"]
    assert error["code"] == "webhook_quota_exceeded" and error["details"] == {"quota": 3}
    assert "KEEPER_WEBHOOKS_PER_TENANT" in error["message"]
    assert WebhookSubscription.objects.filter(tenant=tenant, deleted_at__isnull=True).count() == 3
    # another tenant has its own quota; a deleted subscription frees its place
    other = APIClient()
    other.credentials(
        HTTP_AUTHORIZATION="Bearer " + api_key_create(tenant=other_tenant, name="o", scope="write").plaintext
    )
    assert _subscribe(other, 0).status_code == 201
    assert api.delete(f"/api/v1/webhooks/{made[0].json()['id']}").status_code == 204
    assert _subscribe(api, 3).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_subscriptions_made_at_once_cannot_pass_the_quota_together(settings):
    settings.KEEPER_WEBHOOKS_PER_TENANT = 2
    acme = tenant_ensure(slug="acme")
    outcomes: list[str] = []
    start = threading.Barrier(6)

    def subscribe(n: int) -> None:
        start.wait()
        try:
            with tenant_bind(acme.tenant_id):
                webhook_subscription_create(
                    tenant=acme, url=f"https://hooks.example.com/{n}", event_types=["run.failed"], actor="t"
                )
            outcomes.append("made")
        except Exception as exc:  # the quota's refusal, named below
            outcomes.append(getattr(exc, "code", repr(exc)))
        finally:
            connection.close()

    threads = [threading.Thread(target=subscribe, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["made", "made"] + ["webhook_quota_exceeded"] * 4
    with tenant_bind(acme.tenant_id):
        assert WebhookSubscription.objects.filter(tenant=acme).count() == 2


def test_a_refused_endpoint_is_told_the_rule_not_the_address_its_name_resolves_to(api, tenant, settings):
    settings.DEBUG, settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE, settings.KEEPER_WEBHOOKS_ALLOW_HTTP = (
        False,
        False,
        True,
    )
    resolved = webhook_host_addresses("localhost")
    assert resolved  # the name resolves here (to 127.0.0.1 and perhaps ::1)
    r = api.post(
        "/api/v1/webhooks/", {"url": "https://localhost/h", "event_types": ["run.failed"]}, format="json"
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "webhook_url_private"
    message = str(r.json()["error"])
    assert "must resolve only to public addresses" in message
    assert not [address for address in resolved if address in message], message


def test_a_delivery_refused_at_send_time_names_the_rule_not_the_address(
    tenant, receiver, allow_http, settings
):
    port = receiver.url.split(":")[2].split("/")[0]
    webhook_subscription_create(
        tenant=tenant, url=f"http://localhost:{port}/hooks", event_types=["run.completed"], actor="t"
    )
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 0}, actor="t").run
    for _ in range(5):
        run_advance(run_id=run.run_id, worker_id="w")
    settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = False  # the name now points inward when it is sent
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert "on the deployment's own network" in delivery.last_error
    assert not [a for a in webhook_host_addresses("localhost") if a in delivery.last_error], (
        delivery.last_error
    )
    assert receiver.accepted() == []
