"""Reading long-term memory: only current, unexpired claims of this tenant, subject and namespace."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict
from uuid import UUID

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.item_schema import item_schema_current, item_value_migrate
from memory.models import MemoryItem, MemoryVector, Tombstone


def memory_recall(
    *,
    tenant: Tenant,
    subject_id: str,
    namespaces: list[str] | None = None,
    schema_versions: tuple[int, ...] | None = None,
) -> list[MemoryItem]:
    """The newest valid claim per key. Row-level security already confines the rows to the tenant;
    the filters here say which of the tenant's claims are still true. Values come in their
    namespace's current schema version (memory/item_schema.py); an item of a version this code
    does not know is left out. schema_versions: only items stored in these versions."""
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        items = MemoryItem.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            tenant=tenant,
            subject_id=subject_id,
            invalidated_at__isnull=True,
            valid_from__lte=now,
        )
        if schema_versions is not None:
            items = items.filter(schema_version__in=schema_versions)
        if namespaces is not None:
            items = items.filter(namespace__in=namespaces)
        return [m for m in items.order_by("namespace", "key") if _in_current_schema(m)]


def _in_current_schema(item: MemoryItem) -> bool:
    """Bring the item's value to its namespace's current version in place (not saved); False if
    its version is newer than this code knows."""
    current = item_schema_current(item.namespace)
    if item.schema_version > current:
        return False
    if item.schema_version < current:
        item.value = item_value_migrate(
            namespace=item.namespace, value=item.value, version=item.schema_version
        )
        item.schema_version = current
    return True


def memory_recall_recent(*, tenant: Tenant, subject_id: str, limit: int) -> list[MemoryItem]:
    """The subject's `limit` newest current claims (a context with no query to search by)."""
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryItem.objects.filter(
                Q(expires_at__isnull=True) | Q(expires_at__gt=now),
                tenant=tenant,
                subject_id=subject_id,
                invalidated_at__isnull=True,
                valid_from__lte=now,
            ).order_by("-valid_from", "memory_id")[:limit]
        )


# --- current claims by scope (the LangGraph store's reads; any caller may use them) -------------

COMPARISONS = {"$eq": "exact", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
OPERATORS = {*COMPARISONS, "$ne"}


def memory_current_claims(
    *,
    subject_id: str | None = None,
    namespace_prefix: str | None = None,
    value_filter: dict[str, Any] | None = None,
) -> QuerySet[MemoryItem]:
    """The current (valid, unexpired) claims of a scope, unevaluated: call and evaluate it inside the
    tenant's scope. `namespace_prefix` "a" takes namespace "a" and "a.b" (dots nest namespaces);
    `value_filter` compares top-level fields of the value: {"field": v} or {"field": {"$gt": v}}
    with $eq, $ne, $gt, $gte, $lt, $lte (JSON comparison, as PostgreSQL's jsonb orders values)."""
    now = timezone.now()
    items = MemoryItem.objects.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now), invalidated_at__isnull=True, valid_from__lte=now
    )
    if subject_id is not None:
        items = items.filter(subject_id=subject_id)
    if namespace_prefix is not None:
        items = items.filter(Q(namespace=namespace_prefix) | Q(namespace__startswith=f"{namespace_prefix}."))
    for i, (field, wanted) in enumerate((value_filter or {}).items()):
        alias = f"filter_{i}"
        items = items.alias(**{alias: KeyTransform(field, "value")})
        operators = isinstance(wanted, dict) and wanted and set(wanted) <= OPERATORS
        conditions = wanted if operators else {"$eq": wanted}
        for operator, operand in conditions.items():
            if operator == "$ne":
                items = items.exclude(**{alias: operand})
            else:
                items = items.filter(**{f"{alias}__{COMPARISONS[operator]}": operand})
    return items


def memory_current_claim(*, tenant: Tenant, subject_id: str, namespace: str, key: str) -> MemoryItem | None:
    with tenant_scope(tenant.tenant_id):
        return memory_current_claims(subject_id=subject_id).filter(namespace=namespace, key=key).first()


def memory_current_scopes(*, tenant: Tenant, subject_id: str | None = None) -> list[tuple[str, str]]:
    """The (subject, namespace) pairs that hold a current claim, sorted."""
    with tenant_scope(tenant.tenant_id):
        return list(
            memory_current_claims(subject_id=subject_id)
            .values_list("subject_id", "namespace")
            .distinct()
            .order_by("subject_id", "namespace")
        )


def memory_first_kept(*, tenant: Tenant, memory_ids: list[UUID]) -> dict[UUID, datetime]:
    """When each claim's key was first kept: the start of the chain of values it superseded (a claim
    kept after an invalidation starts a new chain)."""
    if not memory_ids:
        return {}
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """WITH RECURSIVE chain(head, supersedes, valid_from) AS (
                   SELECT memory_id, supersedes, valid_from FROM memory_items
                    WHERE tenant_id = %s AND memory_id = ANY(%s)
                   UNION ALL
                   SELECT c.head, m.supersedes, m.valid_from FROM chain c
                     JOIN memory_items m ON m.memory_id = c.supersedes
               )
               SELECT head, min(valid_from) FROM chain GROUP BY head""",
            [tenant.tenant_id, list(memory_ids)],
        )
        return dict(cursor.fetchall())


# --- everything kept about one subject, for compliance (current or not) -------------------------


def memory_subject_items(*, tenant: Tenant, subject_id: str) -> list[MemoryItem]:
    """Every claim about the subject: current, superseded, invalidated and expired; newest first."""
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryItem.objects.filter(subject_id=subject_id)
            .annotate(vector_count=Count("vectors"))
            .order_by("-created_at", "-valid_from")
        )


def memory_item_recent_list(*, tenant: Tenant, limit: int) -> list[MemoryItem]:
    """The tenant's newest claims, about anyone: current, superseded, invalidated and expired."""
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryItem.objects.filter(tenant_id=tenant.tenant_id)
            .annotate(vector_count=Count("vectors"))
            .order_by("-created_at", "-valid_from")[:limit]
        )


class VectorCount(TypedDict):
    """Vector rows of one embedder key (and its dimensions)."""

    embedder_key: str
    dimensions: int
    count: int


def memory_subject_vector_counts(*, tenant: Tenant, subject_id: str) -> list[VectorCount]:
    """The subject's vector rows per embedder key (counts only; the vectors stay in the database)."""
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryVector.objects.filter(memory__subject_id=subject_id)
            .values("embedder_key", "dimensions")
            .annotate(count=Count("id"))
            .order_by("embedder_key")
        )


def memory_tombstone_count(*, tenant: Tenant, subject_digests: list[str]) -> int:
    """Tombstones laid for the subject (its keyed digest, or the unkeyed one of older erasures)."""
    with tenant_scope(tenant.tenant_id):
        return Tombstone.objects.filter(subject_digest__in=subject_digests).count()


# A claim derived from a retrieval document names it so: source_id "document:<document id>" and
# source_version its source version (what memory's source check compares with the index).
DOCUMENT_SOURCE = "document:"


def memory_claims_with_sources(
    *, tenant: Tenant, after: UUID | None = None, limit: int = 500
) -> list[MemoryItem]:
    """Current claims that cite a run's event or a retrieval document (the sources whose change
    invalidates them), in memory_id order after `after`: one page of a sweep."""
    with tenant_scope(tenant.tenant_id):
        items = MemoryItem.objects.filter(tenant_id=tenant.tenant_id, invalidated_at__isnull=True).filter(
            ~Q(provenance__run_id=None) | Q(provenance__source_id__startswith=DOCUMENT_SOURCE)
        )
        if after is not None:
            items = items.filter(memory_id__gt=after)
        return list(items.order_by("memory_id")[:limit])


def memory_superseded_by(*, tenant: Tenant, memory_ids: list[UUID]) -> dict[UUID, MemoryItem]:
    """{claim: the claim it superseded} for these claims, where that one was invalidated only for
    being superseded (what a claim whose source changed gives back its place to)."""
    with tenant_scope(tenant.tenant_id):
        newer = dict(
            MemoryItem.objects.filter(
                tenant_id=tenant.tenant_id, memory_id__in=memory_ids, supersedes__isnull=False
            ).values_list("memory_id", "supersedes_id")
        )
        older = MemoryItem.objects.filter(
            tenant_id=tenant.tenant_id, memory_id__in=list(newer.values()), invalidation_reason="superseded"
        ).in_bulk()
    return {claim: older[previous] for claim, previous in newer.items() if previous in older}
