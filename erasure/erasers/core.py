"""Keeper's own tables: an API key's label, keyed where it names the subject; and the tables that
hold nobody's data (tenants, staff accounts, Django's bookkeeping, offboarding receipts, the
sandbox's stand-in external systems), declared so."""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from core.digests import erased_id
from core.tenancy import tenant_scope
from erasure.matching import Scope, holds_subject
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free


class LabelsEraser(Eraser):
    """A staff-made label that names the subject (an API key called key-for-cust-7781, active or
    revoked): nothing else ever rewrites it. The label becomes a keyed pseudonym; the key keeps
    working."""

    name = "labels"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        n = 0
        with tenant_scope(scope.tenant_id), connection.cursor() as cursor:
            cursor.execute("SELECT key_id, name FROM api_keys WHERE tenant_id = %s", [scope.tenant_id])
            for key_id, name in cursor.fetchall():
                if holds_subject(name, scope):
                    cursor.execute(
                        "UPDATE api_keys SET name = %s WHERE key_id = %s", [erased_id(name), key_id]
                    )
                    n += 1
        return {"api_keys": n}

    def places(self) -> list[Place]:
        return [
            column_place(
                table="api_keys",
                column="name",
                kind="text",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                what="api_keys.name: a key's label, which staff may name after a customer (keyed)",
            )
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "api_keys",
                "a key's prefix, scope and the digest of its secret",
                "prefix",
                "scope",
                "secret_sha256",
            )
        ]


class DeclaredFree(Eraser):
    """Tables with nothing of a subject in them, and why."""

    name = "declared_free"
    erases = False

    def free(self) -> list[Free]:
        staff = "Django's staff accounts and permissions (staff, not subjects)"
        # The sandbox stands in for the shop's order and payment systems, which Keeper does not own:
        # their records (a customer id on an order) are erased by those systems' own processes.
        external = "a stand-in for an external order/payment system; its records are that system's to erase"
        return [
            free("tenants", "the customer organisation (Keeper's tenant), not a subject", "slug", "name"),
            # The bytes they name are a subject's data, erased through the rows that refer to them
            # (the runs' "artifacts.stored" place); the records hold digests, store names and keys.
            free(
                "stored_artifacts",
                "a stored blob's digest, the store holding it and its key",
                "digest",
                "store",
                "key",
            ),
            free("auth_user", staff, "username", "password", "email", "first_name", "last_name"),
            free("auth_group", staff, "name"),
            free("auth_permission", staff, "codename", "name"),
            free(
                "django_session",
                "staff sign-in sessions (ids and the signed-in user)",
                "session_key",
                "session_data",
            ),
            free(
                "django_admin_log",
                "the Django admin's log of staff edits to staff-managed objects",
                "change_message",
                "object_id",
                "object_repr",
            ),
            free("django_content_type", "model names", "app_label", "model"),
            free("django_migrations", "migration names", "app", "name"),
            free(
                "tenant_offboardings",
                "a tenant's offboarding receipt: ids, the tenant's slug, statuses, counts, index names, "
                "key prefixes, digests and who asked (a staff user or an operator)",
                "tenant_slug",
                "status",
                "requested_by",
                "export_digest",
                "progress",
                "receipt",
                "error",
            ),
            free("sandbox_orders", external, "order_id", "customer_id", "currency", "status", "category"),
            free(
                "sandbox_refunds",
                external,
                "refund_id",
                "order_id",
                "idempotency_key",
                "request_digest",
                "currency",
                "status",
            ),
            free("sandbox_faults", "fault injection settings for tests", "fault", "order_id"),
        ]
