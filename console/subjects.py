"""Subject discovery for compliance: which subjects match an id prefix or something stored about
them (memory keys and values, runs' subject field), within the tenants given. Reads only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Q

from core.models import Tenant
from memory.models import MemoryItem
from runs.engine.models import AgentRun

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
    by tenant and subject id. The tenant filter is explicit; row-level security holds it as well."""
    if not tenants or not query:
        return []
    by_id = {t.tenant_id: t for t in tenants}
    found: dict[tuple[object, str], SubjectMatch] = {}

    def hit(tenant_id: object, subject_id: str, on: str) -> SubjectMatch:
        key = (tenant_id, subject_id)
        if key not in found:
            found[key] = SubjectMatch(tenant=by_id[tenant_id], subject_id=subject_id)  # type: ignore[index]
        match = found[key]
        match.matched_on.add(on)
        return match

    items = MemoryItem.objects.filter(tenant_id__in=list(by_id))
    # value__icontains on a JSONField compares the JSON text ("\"berlin\""): the words a person typed.
    matches = {
        "subject id": Q(subject_id__startswith=query),
        "memory key": Q(key__icontains=query),
        "memory value": Q(value__icontains=query),
    }
    for on, condition in matches.items():
        rows = (
            items.filter(condition)
            .values("tenant_id", "subject_id")
            .annotate(n=Count("memory_id"))
            .order_by("tenant_id", "subject_id")[: limit + 1]
        )
        for row in rows:
            hit(row["tenant_id"], row["subject_id"], on)
    runs = (
        AgentRun.objects.filter(tenant_id__in=list(by_id))
        .exclude(subject="")
        .filter(subject__icontains=query)
        .values_list("tenant_id", "subject")
        .distinct()
        .order_by("tenant_id", "subject")[: limit + 1]
    )
    for tenant_id, subject in runs:
        hit(tenant_id, subject, "subject id" if subject.startswith(query) else "run subject")
    chosen = sorted(found.values(), key=lambda m: (m.tenant.slug, m.subject_id))[:limit]
    _counts(chosen)
    return chosen


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
