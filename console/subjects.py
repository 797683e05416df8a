"""Subject discovery for compliance: which subjects match an id prefix or something stored about
them (memory keys and values, runs' subject field), within the tenants given. Reads only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Q

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import MemoryItem
from runs.kernel.models import AgentRun

MAX_QUERY_CHARS = 200
MAX_SUBJECTS = 50


@dataclass
class SubjectMatch:
    tenant: Tenant
    subject_id: str
    matched_on: set[str] = field(default_factory=set)
    memory_items: int = 0
    runs: int = 0

    @property
    def matched(self) -> str:
        order = ["subject id", "memory key", "memory value", "run subject"]
        return ", ".join(m for m in order if m in self.matched_on)


def subject_search(*, tenants: Sequence[Tenant], query: str, limit: int = MAX_SUBJECTS) -> list[SubjectMatch]:
    """Subjects of these tenants whose id starts with `query`, or one of whose memory items has
    `query` in its key or value, or one of whose runs has it in its subject field; at most `limit`,
    by tenant and subject id. Each tenant is searched in a scope of its own: memory's row-level
    security takes one tenant at a time (a console user may belong to several)."""
    if not tenants or not query:
        return []
    found: list[SubjectMatch] = []
    for tenant in tenants:
        with tenant_scope(tenant.tenant_id):
            found += _search_one(tenant, query, limit)
    chosen = sorted(found, key=lambda m: (m.tenant.slug, m.subject_id))[:limit]
    for tenant in tenants:
        mine = [m for m in chosen if m.tenant.tenant_id == tenant.tenant_id]
        if mine:
            with tenant_scope(tenant.tenant_id):
                _counts(mine)
    return chosen


def _search_one(tenant: Tenant, query: str, limit: int) -> list[SubjectMatch]:
    found: dict[str, SubjectMatch] = {}

    def hit(subject_id: str, on: str) -> None:
        found.setdefault(subject_id, SubjectMatch(tenant=tenant, subject_id=subject_id)).matched_on.add(on)

    items = MemoryItem.objects.filter(tenant_id=tenant.tenant_id)
    # value__icontains on a JSONField compares the JSON text ("\"berlin\""): the words a person typed.
    matches = {
        "subject id": Q(subject_id__startswith=query),
        "memory key": Q(key__icontains=query),
        "memory value": Q(value__icontains=query),
    }
    for on, condition in matches.items():
        rows = (
            items.filter(condition)
            .values("subject_id")
            .annotate(n=Count("memory_id"))
            .order_by("subject_id")[: limit + 1]
        )
        for row in rows:
            hit(row["subject_id"], on)
    runs = (
        AgentRun.objects.filter(tenant_id=tenant.tenant_id)
        .exclude(subject="")
        .filter(subject__icontains=query)
        .values_list("subject", flat=True)
        .distinct()
        .order_by("subject")[: limit + 1]
    )
    for subject in runs:
        hit(subject, "subject id" if subject.startswith(query) else "run subject")
    return list(found.values())


def _counts(matches: list[SubjectMatch]) -> None:
    """How many memory items and runs each found subject has (two grouped queries)."""
    if not matches:
        return
    wanted = Q()
    run_wanted = Q()
    for m in matches:
        wanted |= Q(tenant_id=m.tenant.tenant_id, subject_id=m.subject_id)
        run_wanted |= Q(tenant_id=m.tenant.tenant_id, subject=m.subject_id)
    index = {(m.tenant.tenant_id, m.subject_id): m for m in matches}
    for row in (
        MemoryItem.objects.filter(wanted).values("tenant_id", "subject_id").annotate(n=Count("memory_id"))
    ):
        index[(row["tenant_id"], row["subject_id"])].memory_items = row["n"]
    counted = (
        AgentRun.objects.filter(run_wanted).values_list("tenant_id", "subject").annotate(n=Count("run_id"))
    )
    for tenant_id, subject, n in counted:
        index[(tenant_id, subject)].runs = n
