"""The webhook tables hold no subject data: their columns are declared free in the erasure registry.

A delivery's data is built from ids, statuses and reason codes; a code a workflow or an outside
worker chose can still carry a subject's id (unreachable_cust6662, found from outside), and the scan
searches declared-free columns for it (core.erasure.free_places): WebhooksEraser replaces each such
string of the tenant's deliveries, so a delivery still to be sent carries it no more.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import connection

from core.erasure import (
    Scope,
    erased_id,
    eraser_register,
    erasure_finished_register,
    free_register,
    holds_subject,
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

        condition, params = subject_condition("data", scope.subject_id, json=True)
        by_id = replace(scope, values=())  # the outbox holds ids and codes: the subject's id only

        def holds(text: str) -> bool:
            return holds_subject(text, by_id)

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
    free_register(
        "webhook_subscriptions",
        "the tenant's own endpoint, its signing secret, event type codes and the staff user or key that made it",
        "url",
        "secret",
        "event_types",
        "created_by",
    )
    free_register(
        "webhook_deliveries",
        "event type codes, delivery statuses, and data built only from run ids, statuses, reason codes "
        "and revisions (runs/engine/store.py _WEBHOOK_OUTBOX)",
        "event_type",
        "data",
        "status",
    )
    free_register(
        "webhook_deliveries",
        "the receiver's HTTP status codes and Keeper's own error texts (timeouts, refused connections); "
        "never the receiver's response body",
        "last_error",
        "history",
    )
