"""What reading or writing a stored artifact can fail with, each with its reason code."""

from __future__ import annotations

from core.errors import ApplicationError, InvalidInput, NotFound


class ArtifactUnknown(NotFound):
    """No artifact with this digest was stored for this tenant: nothing is opened."""

    code = "artifact_unknown"


class ArtifactMissing(NotFound):
    """Keeper's record names the blob, but the store no longer has it."""

    code = "artifact_missing"


class ArtifactRefused(InvalidInput):
    """The store found something it will not read: not a regular file, a link out, too large."""

    code = "artifact_refused"


class ArtifactMismatch(InvalidInput):
    """The bytes read back are not the ones the digest names."""

    code = "artifact_digest_mismatch"


class ArtifactRefInvalid(InvalidInput):
    """What was given as a reference names no sha256 digest."""

    code = "artifact_ref_invalid"


class ArtifactTooLarge(InvalidInput):
    code = "artifact_too_large"


class ArtifactStoreUnavailable(ApplicationError):
    """The store did not answer (an S3 endpoint down, a time limit passed): try again later."""

    code = "artifact_store_unavailable"
    http_status = 503
