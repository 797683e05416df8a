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

from core.digests import erased_id
from core.tenancy import tenant_scope
from erasure.matching import Scope, holds_subject, subject_condition
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.conversations.erasure import ERASED
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from runs.webhooks.services import webhook_erasure_finished


def _without(value: Any, holds: Any) -> Any:
    if isinstance(value, str):
        return ERASED if holds(value) else value
    if isinstance(value, list):
        return [_without(v, holds) for v in value]
    if isinstance(value, dict):
        return {k: _without(v, holds) for k, v in value.items()}
    return value


class WebhooksEraser(Eraser):
    name = "webhooks"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        condition, params = subject_condition("data", scope.subject_id, json=True, values=scope.values)

        def holds(text: str) -> bool:
            return holds_subject(text, scope)

        n = 0
        with tenant_scope(scope.tenant_id):
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id, created_at FROM webhook_deliveries WHERE tenant_id = %s AND {condition}",  # noqa: S608
                    [scope.tenant_id, *params],
                )
                found = cursor.fetchall()
            for row_id, created_at in found:
                # (id, created_at) names the row and its month's partition, however old
                delivery = WebhookDelivery.objects.filter(
                    tenant_id=scope.tenant_id, pk=row_id, created_at=created_at
                )
                current = delivery.values_list("data", flat=True).get()
                data = _without(current, holds)
                if data != current:
                    n += delivery.update(data=data)
            # A deleted subscription whose URL names the subject (.../hook/cust-7781): nothing else
            # rewrites it. A live one is the tenant's to change: the receipt names it.
            erased_urls = 0
            for subscription in WebhookSubscription.objects.filter(deleted_at__isnull=False):
                if holds_subject(subscription.url, scope):
                    WebhookSubscription.objects.filter(pk=subscription.pk).update(
                        url=erased_id(subscription.url)
                    )
                    erased_urls += 1
        return {"webhook_deliveries": n, "deleted_subscription_urls": erased_urls}

    def finished(self, *, tenant_id: UUID, request_id: UUID, clean: bool) -> None:
        webhook_erasure_finished(tenant_id=tenant_id, request_id=request_id, clean=clean)

    def places(self) -> list[Place]:
        tenant = "t.tenant_id = %(tenant)s"
        return [
            column_place(
                table="webhook_deliveries",
                column="data",
                kind="json",
                tenant_sql=tenant,
                erased_by=self.name,
                what="webhook_deliveries.data: run ids, statuses, reason codes and revisions; a reason code "
                "an outside worker chose can name the subject (rewritten)",
            ),
            column_place(
                table="webhook_subscriptions",
                column="url",
                kind="text",
                tenant_sql=tenant,
                erased_by=self.name,
                what="webhook_subscriptions.url: the tenant's own endpoint (a deleted one's is keyed)",
                remedy="the tenant's live webhook endpoint names the subject in its URL: delete that "
                "subscription (and subscribe again under another URL), then retry",
            ),
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "webhook_subscriptions",
                "the endpoint's signing secret, event type codes and the staff user or key that made it",
                "secret",
                "event_types",
                "created_by",
            ),
            free("webhook_deliveries", "event type codes and delivery statuses", "event_type", "status"),
            free(
                "webhook_deliveries",
                "the receiver's HTTP status codes and Keeper's own error texts (timeouts, refused "
                "connections); never the receiver's response body",
                "last_error",
                "history",
            ),
        ]
