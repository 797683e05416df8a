"""Workflow versions side by side: what each registered or still-used version holds, and whether an old
one can be removed (drained: no running or suspended run is pinned to it)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count

from core.models import Tenant
from runs.engine.registry import registry, version_key
from runs.kernel.models import ACTIVE_RUN_STATUSES, AgentRun, RunStatus

HOLDING_SHOWN = 5  # run ids listed for a version that is still held


@dataclass(frozen=True)
class VersionRow:
    version: str
    registered: bool  # its code is registered in this process
    newest: bool  # new runs start on it
    runs: dict[str, int]  # status -> count
    holding_run_ids: tuple[str, ...] = ()  # some of its running or suspended runs

    @property
    def active(self) -> int:
        return sum(n for status, n in self.runs.items() if status in ACTIVE_RUN_STATUSES)

    @property
    def safe_to_remove(self) -> bool:
        return not self.newest and self.active == 0

    @property
    def drain(self) -> str:
        """What a person deploying a new version needs to know about this one."""
        if self.newest:
            return "newest: new runs start on it"
        if self.active == 0:
            return "safe to remove"
        held = ", ".join(
            f"{self.runs[s]} {s}" for s in (RunStatus.RUNNING, RunStatus.SUSPENDED) if self.runs.get(s)
        )
        missing = "" if self.registered else " (its code is not registered here: they cannot continue)"
        return f"held by {held} run(s){missing}"


@dataclass(frozen=True)
class WorkflowRow:
    name: str
    description: str
    versions: list[VersionRow] = field(default_factory=list)


def workflow_versions(*, tenant: Tenant | None = None) -> list[WorkflowRow]:
    """Every workflow registered in code or used by a visible run (row-level security decides which
    runs: a tenant's, or a console user's tenants'), each version with its runs by status."""
    runs = AgentRun.objects.all() if tenant is None else AgentRun.objects.filter(tenant=tenant)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for row in runs.values("workflow_name", "workflow_version", "status").annotate(n=Count("run_id")):
        counts[(row["workflow_name"], row["workflow_version"])][row["status"]] = row["n"]
    holding: dict[tuple[str, str], list[str]] = defaultdict(list)
    active = runs.filter(status__in=list(ACTIVE_RUN_STATUSES)).order_by("created_at")
    for name, version, run_id in active.values_list("workflow_name", "workflow_version", "run_id")[:5000]:
        if len(holding[(name, version)]) < HOLDING_SHOWN:
            holding[(name, version)].append(str(run_id))
    names = sorted(set(registry.names()) | {n for n, _ in counts})
    rows: list[WorkflowRow] = []
    for name in names:
        in_code = registry.versions(name)
        newest = in_code[0] if in_code else None
        versions = sorted({*in_code, *(v for n, v in counts if n == name)}, key=version_key, reverse=True)
        description = registry.get(name).description if in_code else ""
        rows.append(
            WorkflowRow(
                name=name,
                description=description,
                versions=[
                    VersionRow(
                        version=v,
                        registered=v in in_code,
                        newest=v == newest,
                        runs=dict(sorted(counts.get((name, v), {}).items())),
                        holding_run_ids=tuple(holding.get((name, v), ())),
                    )
                    for v in versions
                ],
            )
        )
    return rows
