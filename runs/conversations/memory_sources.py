"""Memory that follows its sources: which claims' sources no longer support them.

A claim cites an event (provenance run_id and event_seq) or a retrieval document (source_id
"document:<id>", source_version). It stops being current when, since it was kept:
- its event was redacted (an erasure of the run's subject redacts the run's content);
- its event was rewound away (the run was superseded by a rewind to an earlier event);
- its event was said in a fork that was then cancelled or expired, an abandoned branch (an event the
  fork copied from its parent is judged by the parent's own event);
- its document was replaced by another version, or deleted.
A missing run or event is no change: retention deletes old runs by policy and memory outlives them.
Checked when memory goes into a context (MemorySource) and swept on the beat (every claim that
cites a source, page by page); memory/sources.py writes the invalidations and gives a claim the
superseded one's place back when that one's own source still holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db.models import Q

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import MemoryItem
from memory.selectors import DOCUMENT_SOURCE, memory_claims_with_sources, memory_superseded_by
from memory.sources import (
    SOURCE_DOCUMENT_CHANGED,
    SOURCE_DOCUMENT_DELETED,
    SOURCE_FORK_ABANDONED,
    SOURCE_REDACTED,
    SOURCE_REWOUND,
    SourceChange,
    memory_sources_changed,
)
from retrieval.models import Document
from runs.kernel.models import AgentEvent, AgentRun, RunStatus

SWEEP_PAGE = 500


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value)) if value is not None else None
    except ValueError:
        return None


def _seq(value: Any) -> int | None:
    return value if type(value) is int else None


class _Runs:
    """The runs and events a set of claims cite, read once (each query names the tenant)."""

    def __init__(self, tenant_id: UUID, cited: set[tuple[UUID, int | None]]):
        self.tenant_id = tenant_id
        self.runs = self._runs({run for run, _ in cited})
        parents = {r["parent_run_id"] for r in self.runs.values() if r["parent_run_id"]}
        self.runs.update(self._runs(parents - set(self.runs)))
        children = {r["superseded_by"] for r in self.runs.values() if r["superseded_by"]}
        self.rewound_to = dict(
            AgentRun.objects.filter(tenant_id=tenant_id, run_id__in=children).values_list(
                "run_id", "fork_seq"
            )
        )
        self.events = self._events({(run, seq) for run, seq in cited if seq is not None})
        origins = {self._origin(e) for e in self.events.values()} - {None} - set(self.events)
        self.events.update(self._events({o for o in origins if o is not None}))

    def _runs(self, ids: set[UUID]) -> dict[UUID, dict[str, Any]]:
        if not ids:
            return {}
        rows = AgentRun.objects.filter(tenant_id=self.tenant_id, run_id__in=ids).values(
            "run_id", "status", "parent_run_id", "fork_seq", "superseded_by", "subject"
        )
        return {r["run_id"]: dict(r) for r in rows}

    def _events(self, wanted: set[tuple[UUID, int]]) -> dict[tuple[UUID, int], dict[str, Any]]:
        if not wanted:
            return {}
        by_run: dict[UUID, list[int]] = {}
        for run, seq in wanted:
            by_run.setdefault(run, []).append(seq)
        match = Q()
        for run, seqs in by_run.items():
            match |= Q(run_id=run, seq__in=seqs)
        rows = AgentEvent.objects.filter(match, tenant_id=self.tenant_id).values("run_id", "seq", "payload")
        return {(r["run_id"], r["seq"]): dict(r) for r in rows}

    @staticmethod
    def _origin(event: dict[str, Any]) -> tuple[UUID, int] | None:
        origin = (event.get("payload") or {}).get("forked_from")
        if not isinstance(origin, dict):
            return None
        run, seq = _uuid(origin.get("run_id")), _seq(origin.get("seq"))
        return (run, seq) if run is not None and seq is not None else None

    def change(self, run_id: UUID, seq: int | None, depth: int = 0) -> tuple[str, str] | None:
        """(code, detail) if the event (or, seq None, the run) no longer supports a claim."""
        run = self.runs.get(run_id)
        if run is None:
            return None  # purged by retention, or never a run here: no evidence of a change
        if str(run["subject"]).startswith("erased:"):
            return SOURCE_REDACTED, f"run {run_id}'s subject was erased and its content redacted"
        event = self.events.get((run_id, seq)) if seq is not None else None
        if event is not None and "redacted" in (event.get("payload") or {}):
            return SOURCE_REDACTED, f"event {seq} of run {run_id} was redacted"
        child = run["superseded_by"]
        if child is not None and seq is not None:
            to_seq = self.rewound_to.get(child)
            if to_seq is not None and seq > to_seq:
                return (
                    SOURCE_REWOUND,
                    f"event {seq} of run {run_id} was rewound away (the run continues as {child} from "
                    f"event {to_seq})",
                )
        origin = self._origin(event) if event is not None else None
        if origin is not None and depth < 8:  # a copy a fork made: the parent's event is the source
            return self.change(*origin, depth=depth + 1)
        if run["parent_run_id"] is not None and run["status"] == RunStatus.CANCELLED and child is None:
            return SOURCE_FORK_ABANDONED, f"run {run_id} is a fork that was cancelled or expired"
        return None


def claims_source_changes(*, tenant: Tenant, claims: Sequence[MemoryItem]) -> list[SourceChange]:
    """The claims among these whose run event or retrieval document no longer supports them."""
    with tenant_scope(tenant.tenant_id):
        return _changes(tenant, claims)


def _changes(tenant: Tenant, claims: Sequence[MemoryItem]) -> list[SourceChange]:
    cited: dict[UUID, tuple[UUID, int | None]] = {}
    documents: dict[UUID, tuple[str, Any]] = {}
    for claim in claims:
        p = claim.provenance or {}
        run = _uuid(p.get("run_id"))
        if run is not None:
            cited[claim.memory_id] = (run, _seq(p.get("event_seq")))
        source = p.get("source_id")
        if isinstance(source, str) and source.startswith(DOCUMENT_SOURCE):
            documents[claim.memory_id] = (source.removeprefix(DOCUMENT_SOURCE), p.get("source_version"))
    changes: list[SourceChange] = []
    if cited:
        runs = _Runs(tenant.tenant_id, set(cited.values()))
        for memory_id, (run_id, seq) in cited.items():
            found = runs.change(run_id, seq)
            if found is not None:
                changes.append(SourceChange(memory_id, *found))
    if documents:
        current = dict(
            Document.objects.filter(
                tenant_id=tenant.tenant_id, document_id__in={d for d, _ in documents.values()}
            ).values_list("document_id", "source_version")
        )
        for memory_id, (document_id, version) in documents.items():
            if any(c.memory_id == memory_id for c in changes):
                continue
            if document_id not in current:
                changes.append(
                    SourceChange(memory_id, SOURCE_DOCUMENT_DELETED, f"document {document_id} was deleted")
                )
            elif version is not None and str(version) != current[document_id]:
                changes.append(
                    SourceChange(
                        memory_id,
                        SOURCE_DOCUMENT_CHANGED,
                        f"document {document_id} is now version {current[document_id]}, not {version}",
                    )
                )
    return changes


def claims_follow_sources(*, tenant: Tenant, claims: Sequence[MemoryItem]) -> set[UUID]:
    """Invalidate those of these claims whose source changed (a superseded claim whose own source
    holds takes its place back); returns the ids invalidated."""
    changes = claims_source_changes(tenant=tenant, claims=claims)
    if not changes:
        return set()
    previous = memory_superseded_by(tenant=tenant, memory_ids=[c.memory_id for c in changes])
    broken = {c.memory_id for c in claims_source_changes(tenant=tenant, claims=list(previous.values()))}
    restore = {claim: old for claim, old in previous.items() if old.memory_id not in broken}
    memory_sources_changed(tenant=tenant, changes=changes, restore=restore)
    return {c.memory_id for c in changes}


def memory_sources_sweep() -> int:
    """The beat's pass over every tenant's claims that cite a source: how many were invalidated."""
    invalidated = 0
    for tenant in Tenant.objects.all():
        after: UUID | None = None
        while True:
            page = memory_claims_with_sources(tenant=tenant, after=after, limit=SWEEP_PAGE)
            if not page:
                break
            invalidated += len(claims_follow_sources(tenant=tenant, claims=page))
            after = page[-1].memory_id
    return invalidated
