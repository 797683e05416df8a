"""The webhook tables hold no subject data: their columns are declared free in the erasure registry."""

from __future__ import annotations

from core.erasure import erasure_finished_register, free_register


def register() -> None:
    from runs.webhooks.services import webhook_erasure_finished

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
