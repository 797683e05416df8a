"""A subject's runs' workspaces: their snapshots, the merges they took part in, and the blobs only
they name, deleted."""

from __future__ import annotations

from uuid import UUID

from core.artifacts import artifacts_referenced
from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.engine.selectors import subject_run_ids
from runs.engine.workspace import workspace_digests_of, workspace_forget


class WorkspaceEraser(Eraser):
    """A subject's runs' (and their forks') snapshots are deleted, and the blobs only they name."""

    name = "workspace"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        with tenant_scope(tenant_id):
            run_ids = subject_run_ids(
                tenant_id=tenant_id, subject_id=subject_id, subject_digest=subject_digest
            )
        digests = workspace_digests_of(tenant_id=tenant_id, run_ids=list(run_ids))
        shared = artifacts_referenced(tenant_id=tenant_id, digests=digests, except_runs=run_ids)
        return Scope(
            tenant_id=tenant_id,
            subject_id=subject_id,
            run_ids=run_ids,
            artifact_digests=tuple(sorted(digests - shared)),
        )

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        return workspace_forget(
            tenant_id=scope.tenant_id, run_ids=list(scope.run_ids), digests=set(scope.artifact_digests)
        )

    def places(self) -> list[Place]:
        merges = [
            column_place(
                table="workspace_merges",
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                mine_sql="(t.target_run_id = ANY(%(runs)s::uuid[]) OR t.source_run_id = ANY(%(runs)s::uuid[]))",
                owner_sql="(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.target_run_id)",
                what=f"workspace_merges.{column}: {what} (deleted with the merge)",
            )
            for column, kind, what in (
                ("conflicts", "json", "the conflicting lines of each side (file text)"),
                ("manifest", "json", "file paths and digests"),
                ("sides", "json", "file paths and digests of each side"),
                ("taken", "json", "file paths and where each came from"),
                ("state_taken", "json", "the state's keys taken (and the merged state while open)"),
                ("actor", "text", "who asked for the merge"),
                ("resolved_by", "text", "who resolved it"),
            )
        ]
        return merges + [
            column_place(
                table="workspace_snapshots",
                column=column,
                kind="json",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                mine_sql="t.run_id = ANY(%(runs)s::uuid[])",
                owner_sql="(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.run_id)",
                what=f"workspace_snapshots.{column}: {what} (deleted)",
            )
            for column, what in (
                ("manifest", "file paths, digests and sizes"),
                ("changes", "each step's changed file paths, digests and sizes"),
            )
        ]

    def free(self) -> list[Free]:
        return [
            free("workspace_snapshots", "why the snapshot was taken (a code)", "reason"),
            free("workspace_merges", "the merge's status (a code)", "status"),
        ]
