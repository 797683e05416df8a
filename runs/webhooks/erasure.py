"""The webhook tables in the erasure registry: a delivery's data and a subscription's URL.

A delivery's data is built from ids, statuses and reason codes; a code a workflow or an outside
worker chose can still carry a subject's id (unreachable_cust6662): WebhooksEraser replaces each such
string of the tenant's deliveries, so a delivery still to be sent carries it no more, and keys the URL
of a deleted subscription that names the subject (a live one is the tenant's to change).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection

from core.erasure import (
    Scope,
    column_place,
    erased_id,
    eraser_register,
    erasure_finished_register,
    free_register,
    holds_subject,
    place_register,
    subject_condition,
)
from core.tenancy import tenant_scope

ERASED = "[erased]"


def _without(value: Any, holds: Any) -> Any:
    if isinstance(value, str):
        return ERASED if holds(value) else value
    if isinstance(value, list):
        return [_without(v, holds) for v in value]
    if isinstance(value, dict):
        return {k: _without(v, holds) for k, v in value.items()}
    return value


class WebhooksEraser:
    name = "webhooks"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        return Scope(tenant_id=tenant_id, subject_id=subject_id)

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        from runs.webhooks.models import WebhookDelivery, WebhookSubscription

        condition, params = subject_condition("data", scope.subject_id, json=True, values=scope.values)

        def holds(text: str) -> bool:
            return holds_subject(text, scope)

        n = 0
        with tenant_scope(scope.tenant_id):
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id FROM webhook_deliveries WHERE tenant_id = %s AND {condition}",  # noqa: S608
                    [scope.tenant_id, *params],
                )
                found = [row[0] for row in cursor.fetchall()]
            for delivery in WebhookDelivery.objects.filter(pk__in=found):
                data = _without(delivery.data, holds)
                if data != delivery.data:
                    WebhookDelivery.objects.filter(pk=delivery.pk).update(data=data)
                    n += 1
            # A deleted subscription whose URL names the subject (.../hook/cust-7781): nothing else
            # rewrites it (found from outside). A live one is the tenant's to change: the receipt names it.
            erased_urls = 0
            for subscription in WebhookSubscription.objects.filter(deleted_at__isnull=False):
                if holds_subject(subscription.url, scope):
                    WebhookSubscription.objects.filter(pk=subscription.pk).update(
                        url=erased_id(subscription.url)
                    )
                    erased_urls += 1
        return {"webhook_deliveries": n, "deleted_subscription_urls": erased_urls}


def register() -> None:
    from runs.webhooks.services import webhook_erasure_finished

    eraser_register(WebhooksEraser())
    erasure_finished_register(webhook_erasure_finished)
    tenant = "t.tenant_id = %(tenant)s"
    place_register(
        column_place(
            table="webhook_deliveries",
            column="data",
            kind="json",
            tenant_sql=tenant,
            erased_by="webhooks",
            what="webhook_deliveries.data: run ids, statuses, reason codes and revisions; a reason code "
            "an outside worker chose can name the subject (rewritten)",
        )
    )
    place_register(
        column_place(
            table="webhook_subscriptions",
            column="url",
            kind="text",
            tenant_sql=tenant,
            erased_by="webhooks",
            what="webhook_subscriptions.url: the tenant's own endpoint (a deleted one's is keyed)",
            remedy="the tenant's live webhook endpoint names the subject in its URL: delete that "
            "subscription (and subscribe again under another URL), then retry",
        )
    )
    free_register(
        "webhook_subscriptions",
        "the endpoint's signing secret, event type codes and the staff user or key that made it",
        "secret",
        "event_types",
        "created_by",
    )
    free_register("webhook_deliveries", "event type codes and delivery statuses", "event_type", "status")
    free_register(
        "webhook_deliveries",
        "the receiver's HTTP status codes and Keeper's own error texts (timeouts, refused connections); "
        "never the receiver's response body",
        "last_error",
        "history",
    )
