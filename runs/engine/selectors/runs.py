"""Reads of runs: one run, the API's list and the console's filtered list, both as keyset pages."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from uuid import UUID

from django.db.models import Q, QuerySet

from core.db import wire
from core.models import Tenant
from core.pagination import KeysetPage, keyset_after, keyset_cut, keyset_page
from core.tenancy import tenant_bound, tenant_of_call
from runs.engine.workspace_models import WorkspaceMerge
from runs.kernel.errors import RunNotFound
from runs.kernel.models import AgentRun

# The index-friendly order of every run list: newest activity first (indexes lead with updated_at,
# or with tenant_id then updated_at).
RUN_KEYS = ("updated_at", "run_id")
# A walk that must see every run once pages by creation instead: created_at never changes, while a
# run that commits during the walk moves ahead of an updated_at cursor and is not seen.
RUN_CREATED_KEYS = ("created_at", "run_id")
MAX_MERGED_TENANTS = 50
# Only what a list row shows: a run's state may be 256 KB, and a page must not drag 50 of them along.
LIST_FIELDS = (
    "run_id",
    "tenant_id",
    "workflow_name",
    "workflow_version",
    "status",
    "next_step",
    "suspend_reason",
    "resume_requested_at",
    "state_revision",
    "lease_owner",
    "lease_expires_at",
    "attempt",
    "idempotency_key",
    "subject",
    "created_at",
    "updated_at",
    "superseded_by",
    "parent_run",
)

RunCursor = tuple[datetime, UUID]


@tenant_of_call
def run_get(*, run_id: UUID) -> AgentRun:
    # the run's own tenant, which tenant_of_call bound (a run of none finds nothing)
    run = AgentRun.objects.select_related("tenant").filter(run_id=run_id, tenant_id=tenant_bound()).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    return run


def run_get_for_tenants(*, tenant_ids: list[UUID], run_id: UUID) -> AgentRun | None:
    """The run if it belongs to one of `tenant_ids` (runs have no row-level security)."""
    return AgentRun.objects.select_related("tenant").filter(run_id=run_id, tenant_id__in=tenant_ids).first()


def fork_list(*, run: AgentRun, limit: int = 20) -> list[AgentRun]:
    """The run's newest forks (only what a link to each shows)."""
    forks = run.forks.filter(tenant_id=run.tenant_id).only("run_id", "status", "fork_seq", "created_at")
    return list(forks.order_by("-created_at")[:limit])


def child_list(*, run: AgentRun, limit: int = 20) -> list[AgentRun]:
    """The run's newest child runs (only what a link to each shows)."""
    children = run.children.filter(tenant_id=run.tenant_id).only("run_id", "workflow_name", "status")
    return list(children.order_by("-created_at")[:limit])


def merge_list(*, run: AgentRun, limit: int = 20) -> list[WorkspaceMerge]:
    """The newest merges into or out of the run (only what a link to each shows)."""
    merges = WorkspaceMerge.objects.filter(tenant_id=run.tenant_id).filter(
        Q(target_id=run.run_id) | Q(source_id=run.run_id)
    )
    return list(
        merges.only("merge_id", "target_id", "source_id", "status", "result_seq", "created_at").order_by(
            "-created_at"
        )[:limit]
    )


def run_list(*, status: str | None = None, workflow_name: str | None = None) -> QuerySet[AgentRun]:
    runs = AgentRun.objects.select_related("tenant").order_by("-created_at")
    if status:
        runs = runs.filter(status=status)
    if workflow_name:
        runs = runs.filter(workflow_name=workflow_name)
    return runs


@tenant_of_call
def run_page(
    *,
    tenant: Tenant | None,
    cursor: RunCursor | None,
    limit: int,
    status: str | None = None,
    workflow: str | None = None,
    subject: str | None = None,
    idempotency_key: str | None = None,
    order: str = "updated",
) -> KeysetPage[AgentRun]:
    """One keyset page of a tenant's runs (every tenant's with `tenant=None`: staff only), newest
    activity first, or newest first by creation with `order="created"` (no OFFSET, no COUNT)."""
    runs = AgentRun.objects.select_related("tenant")
    if tenant is not None:
        runs = runs.filter(tenant=tenant)
    for field, value in (
        ("status", status),
        ("workflow_name", workflow),
        ("subject", subject),
        ("idempotency_key", idempotency_key),
    ):
        if value is not None:
            runs = runs.filter(**{field: value})
    keys = RUN_CREATED_KEYS if order == "created" else RUN_KEYS
    return keyset_page(runs, keys=keys, cursor=cursor, limit=limit)


def run_filtered(*, tenant_ids: list[UUID], filters: Mapping[str, object]) -> QuerySet[AgentRun]:
    """The user's runs that match validated filters (unordered); `tenant_id` narrows to one of them."""
    runs = AgentRun.objects.filter(tenant_id__in=tenant_ids)
    if isinstance(tenant_id := filters.get("tenant_id"), UUID):
        runs = runs.filter(tenant_id=tenant_id)
    if query := str(filters.get("q") or "").strip():
        try:
            runs = runs.filter(Q(run_id=UUID(query)) | Q(idempotency_key=query))
        except ValueError:
            runs = runs.filter(idempotency_key=query)
    for field, column in (
        ("status", "status"),
        ("workflow", "workflow_name"),
        ("version", "workflow_version"),
        ("subject", "subject"),
    ):
        if filters.get(field):
            runs = runs.filter(**{column: filters[field]})
    if reason := str(filters.get("reason") or "").strip():  # free text in the suspend reason or detail
        runs = runs.filter(Q(suspend_reason__icontains=reason) | Q(suspend_detail__icontains=reason))
    if filters.get("since"):
        runs = runs.filter(updated_at__gte=filters["since"])
    if filters.get("until"):
        runs = runs.filter(updated_at__lte=filters["until"])
    return runs


# The console's run list orders: by last activity or by start, newest or oldest first.
RUN_ORDERS: dict[str, tuple[tuple[str, str], bool]] = {
    "updated": (RUN_KEYS, True),
    "updated_asc": (RUN_KEYS, False),
    "started": (RUN_CREATED_KEYS, True),
    "started_asc": (RUN_CREATED_KEYS, False),
}


def run_filtered_page(
    *,
    tenant_ids: list[UUID],
    filters: Mapping[str, object],
    cursor: RunCursor | None,
    limit: int,
    order: str = "updated",
) -> KeysetPage[AgentRun]:
    """One keyset page of the filtered runs in `order` (RUN_ORDERS; newest activity first by default).

    For several tenants it is one UNION ALL of a page per tenant (each an ordered range scan of an
    index led by tenant_id), merged and cut again: `tenant_id IN (...)` cannot be read in order."""
    keys, descending = RUN_ORDERS.get(order, RUN_ORDERS["updated"])
    tenant_id = filters.get("tenant_id")
    tenants = [tenant_id] if isinstance(tenant_id, UUID) else tenant_ids
    if 1 < len(tenants) <= MAX_MERGED_TENANTS:
        parts = [
            keyset_after(
                run_filtered(tenant_ids=[t], filters=filters).only(*LIST_FIELDS),
                keys=keys,
                cursor=cursor,
                descending=descending,
            )[: limit + 1]
            for t in tenants
        ]
        merged = parts[0].union(*parts[1:], all=True).order_by(*(f"-{k}" if descending else k for k in keys))
        return keyset_cut(list(merged[: limit + 1]), keys=keys, limit=limit)
    runs = run_filtered(tenant_ids=tenants, filters=filters).only(*LIST_FIELDS)
    return keyset_page(runs, keys=keys, cursor=cursor, limit=limit, descending=descending)


def run_count_capped(*, runs: QuerySet[AgentRun], cap: int) -> int:
    """How many rows match, counting no further than cap + 1 (never a COUNT over the whole table)."""
    return len(runs.order_by().values_list("run_id", flat=True)[: cap + 1])


_SUBJECT_RUNS = """
WITH RECURSIVE tree AS (
  SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND subject IN (%(subject)s, %(erased)s)
  UNION
  SELECT r.run_id FROM agent_runs r JOIN tree ON r.parent_run_id = tree.run_id WHERE r.tenant_id = %(tenant)s)
SELECT run_id FROM tree
"""


def subject_run_ids(*, tenant_id: UUID, subject_id: str, subject_digest: str) -> tuple[UUID, ...]:
    """The subject's runs and every fork of them (sorted), including runs an interrupted erasure
    already marked `erased:<digest>`: what each eraser of run data works on. Under the bound tenant."""
    params = {"tenant": tenant_id, "subject": subject_id, "erased": f"erased:{subject_digest}"}
    return tuple(sorted(row[0] for row in wire.rows(_SUBJECT_RUNS, params)))
