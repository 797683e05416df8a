"""Reads of runs: one run, the API's list and the console's filtered list, both as keyset pages."""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from django.db.models import F, Q, QuerySet, Value
from django.db.models.lookups import Exact, GreaterThan, LessThan

from core.db import wire
from core.models import Tenant
from core.pagination import KeysetPage, ListOrder, keyset_after, keyset_cut, keyset_order, list_orders
from core.tenancy import tenant_bound, tenant_of_call
from runs.engine.workspace_models import WorkspaceMerge
from runs.kernel.errors import RunNotFound
from runs.kernel.models import AgentRun

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

RunCursor = tuple[object, ...]  # the last row's key values in the list's order, run_id last


# Every order of the run lists (the console's and the API's), each served by an index led by
# tenant_id for one tenant's list. The default is newest activity first; a walk that must see every
# run once pages by start instead: created_at never changes, while a run that commits during the walk
# moves ahead of an updated_at cursor (and a run that changes status, of a status one). `tenant`
# sorts by the tenant's slug. By status, the runs of one status follow their start (oldest first A to
# Z, newest first Z to A): agent_runs_tenant_st_cre_idx serves that and the status filter's
# newest-first list both, one index fewer for every run's insert and status change to keep.
RUN_ORDERS: dict[str, ListOrder] = {
    **list_orders("updated", "updated_at", "time", tie="run_id", newest_first=True),
    **list_orders("started", "created_at", "time", tie="run_id", newest_first=True),
    **list_orders("workflow", "workflow_name", "text", tie="run_id"),
    **list_orders("status", "status", "text", tie="run_id", then=(("created_at", "time"),)),
    **list_orders("tenant", "tenant_slug", "text", tie="run_id"),
    **list_orders("subject", "subject", "text", tie="run_id"),
}


def _runs_after(
    runs: QuerySet[AgentRun], order: ListOrder, cursor: RunCursor | None, *, slug: str | None = None
) -> QuerySet[AgentRun]:
    """`runs` after `cursor` in `order`, ordered. `slug`: the runs are one tenant's, whose slug it is.

    By tenant, one tenant's runs all share the slug: it is written into the query as a constant, which
    PostgreSQL drops from the sort and from the condition (`'acme' > 'acme'` folds to false), leaving
    run_id after the cursor's, or every run, or none: a range of the primary key instead of sorting
    the tenant's runs by a column of another table."""
    if order.column != "tenant_slug":
        return keyset_after(
            runs, keys=order.keys, cursor=cursor, descending=order.descending, nullable=order.nullable
        )
    if slug is None:  # several tenants at once (a staff session's API list): joined and sorted
        runs = runs.annotate(tenant_slug=F("tenant__slug"))
        return keyset_after(runs, keys=order.keys, cursor=cursor, descending=order.descending)
    runs = keyset_order(runs.annotate(tenant_slug=Value(slug)), keys=order.keys, descending=order.descending)
    if cursor is None:
        return runs
    value, run_id = cursor
    past, beyond = (LessThan, "lt") if order.descending else (GreaterThan, "gt")
    return runs.filter(
        Q(past(Value(slug), Value(value)))
        | Q(Exact(Value(slug), Value(value)), **{f"run_id__{beyond}": run_id})
    )


def run_cursor_encode(*, order: str, cursor: tuple[object, ...]) -> str:
    """A page's cursor as the token a link or the API carries (`run_cursor_decode` reads it back)."""
    return RUN_ORDERS[order].encode(order, cursor)


def run_cursor_decode(*, order: str, token: str) -> RunCursor:
    """The cursor of a `run_cursor_encode` token for `order`; `CursorInvalid` for any other token."""
    cursor = RUN_ORDERS[order].decode(order, token)
    assert isinstance(cursor[-1], UUID)
    return cursor


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
    """One keyset page of a tenant's runs (every tenant's with `tenant=None`: staff only) in `order`
    (RUN_ORDERS; newest activity first by default; no OFFSET, no COUNT)."""
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
    chosen = RUN_ORDERS[order]
    after = _runs_after(runs, chosen, cursor, slug=tenant.slug if tenant is not None else None)
    return keyset_cut(list(after[: limit + 1]), keys=chosen.keys, limit=limit)


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
    chosen = RUN_ORDERS[order]
    keys, descending = chosen.keys, chosen.descending
    tenant_id = filters.get("tenant_id")
    tenants = [tenant_id] if isinstance(tenant_id, UUID) else tenant_ids
    slugs: dict[UUID, str | None] = dict.fromkeys(tenants)
    if chosen.column == "tenant_slug" and len(tenants) <= MAX_MERGED_TENANTS:
        slugs.update(Tenant.objects.filter(tenant_id__in=tenants).values_list("tenant_id", "slug"))
    if 1 < len(tenants) <= MAX_MERGED_TENANTS:
        parts = [
            _runs_after(
                run_filtered(tenant_ids=[t], filters=filters).only(*LIST_FIELDS),
                chosen,
                cursor,
                slug=slugs[t],
            )[: limit + 1]
            for t in tenants
        ]
        merged = parts[0].union(*parts[1:], all=True).order_by(*(f"-{k}" if descending else k for k in keys))
        return keyset_cut(list(merged[: limit + 1]), keys=keys, limit=limit)
    runs = run_filtered(tenant_ids=tenants, filters=filters).only(*LIST_FIELDS)
    one = slugs[tenants[0]] if len(tenants) == 1 else None
    return keyset_cut(list(_runs_after(runs, chosen, cursor, slug=one)[: limit + 1]), keys=keys, limit=limit)


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
