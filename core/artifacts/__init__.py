"""Stored blobs (tool results, workspace files, anything a run keeps by digest): one interface, two
backends (a local folder, S3-compatible object storage), a record per tenant and digest.

Callers keep `{"digest", "size"}`; reading resolves the digest through the tenant's own records.
"""

from __future__ import annotations

from core.artifacts.errors import (
    ArtifactMismatch,
    ArtifactMissing,
    ArtifactRefused,
    ArtifactStoreUnavailable,
    ArtifactTooLarge,
    ArtifactUnknown,
)
from core.artifacts.references import ReferencePlace, artifact_references_register, artifacts_referenced
from core.artifacts.services import (
    ArtifactCheck,
    artifact_digests_in,
    artifact_get,
    artifact_put,
    artifact_put_many,
    artifacts_check,
    artifacts_stored,
)
from core.artifacts.store import ArtifactStore, artifact_store

__all__ = [
    "ArtifactCheck",
    "ArtifactMismatch",
    "ArtifactMissing",
    "ArtifactRefused",
    "ArtifactStore",
    "ArtifactStoreUnavailable",
    "ArtifactTooLarge",
    "ArtifactUnknown",
    "ReferencePlace",
    "artifact_digests_in",
    "artifact_get",
    "artifact_put",
    "artifact_put_many",
    "artifact_references_register",
    "artifact_store",
    "artifacts_check",
    "artifacts_referenced",
    "artifacts_stored",
]
