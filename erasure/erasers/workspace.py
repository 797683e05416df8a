"""A subject's runs' workspaces: their manifests, and the blobs only they name, deleted."""

from __future__ import annotations

from uuid import UUID

from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.engine import store
from runs.engine.workspace import workspace_blobs_left, workspace_blobs_only_of, workspace_forget


class WorkspaceEraser(Eraser):
    name = "workspace"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        with tenant_scope(tenant_id):
            run_ids = store.subject_run_ids(
                tenant_id=tenant_id, subject_id=subject_id, subject_digest=subject_digest
            )
        only_theirs = workspace_blobs_only_of(tenant_id=tenant_id, run_ids=list(run_ids))
        return Scope(
            tenant_id=tenant_id,
            subject_id=subject_id,
            run_ids=run_ids,
            artifact_uris=tuple(sorted(f"file://{p}" for p in only_theirs)),
        )

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        return workspace_forget(tenant_id=scope.tenant_id, run_ids=list(scope.run_ids))

    def places(self) -> list[Place]:
        return [
            column_place(
                table="workspace_snapshots",
                column="manifest",
                kind="json",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                mine_sql="t.run_id = ANY(%(runs)s::uuid[])",
                owner_sql="(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.run_id)",
                what="workspace_snapshots.manifest: file paths, digests and URIs (deleted)",
            ),
            Place(
                name="artifacts.workspace_blobs",
                what="workspace files (blobs by digest) the subject's runs' manifests name",
                erased_by=self.name,
                count=lambda scope: workspace_blobs_left(
                    tenant_id=scope.tenant_id, run_ids=list(scope.run_ids)
                ),
            ),
        ]

    def free(self) -> list[Free]:
        return [free("workspace_snapshots", "why the snapshot was taken (a code)", "reason")]
