"""The lease token: how a lease travels to an outside worker, signed with SECRET_KEY.

`lt1.<body>.<mac>`: HMAC-SHA256 over the run, tenant, epoch, owner and issue time (and, while a
take-over waits for the worker's lookups, the previous holder it took over from). Checked on every
call before anything is read or written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from uuid import UUID

from django.conf import settings

from core.digests import canonical_json
from core.errors import ApplicationError

MAX_TOKEN_AGE_S = 24 * 3600  # a lease token older than this is refused: claim again
_SALT = b"keeper.external.lease-token.v1"


class LeaseTokenInvalid(ApplicationError):
    """Forged, damaged, of another tenant or run, or too old: nothing was read or changed."""

    code = "invalid_lease_token"
    http_status = 403


@dataclass(frozen=True)
class Lease:
    run_id: UUID
    tenant_id: UUID
    epoch: int
    owner: str
    issued_at: float
    # A take-over whose operations in doubt wait for the worker's lookups: verification has not run
    # yet, and nothing but the lookups (or a heartbeat, or a release) is accepted under this token.
    verifying: bool = False
    previous_owner: str | None = None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _mac(body: str) -> str:
    key = hashlib.sha256(_SALT + settings.SECRET_KEY.encode()).digest()
    return _b64(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())


def lease_token_sign(
    *,
    run_id: UUID,
    tenant_id: UUID,
    epoch: int,
    owner: str,
    issued_at: float | None = None,
    verifying: bool = False,
    previous_owner: str | None = None,
) -> str:
    claims: dict[str, object] = {"r": str(run_id), "t": str(tenant_id), "e": epoch, "o": owner,
                                 "i": int(issued_at or time.time())}  # fmt: skip
    if verifying:
        claims["v"] = 1
        claims["p"] = previous_owner
    body = _b64(canonical_json(claims).encode())
    return f"lt1.{body}.{_mac(body)}"


def lease_token_verify(*, token: str, tenant_id: UUID, run_id: UUID) -> Lease:
    """The lease a token names, if Keeper signed it for this tenant and run and it is not too old."""
    parts = token.split(".") if isinstance(token, str) and token.isascii() else []
    if len(parts) != 3 or parts[0] != "lt1" or not hmac.compare_digest(parts[2], _mac(parts[1])):
        raise LeaseTokenInvalid("the lease token is not one Keeper signed (forged or damaged)")
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):  # signed by Keeper, so never: but a damaged one is refused
        raise LeaseTokenInvalid("the lease token is not one Keeper signed (forged or damaged)") from None
    if claims["t"] != str(tenant_id):
        raise LeaseTokenInvalid("the lease token belongs to another tenant", code="lease_token_other_tenant")
    if claims["r"] != str(run_id):
        raise LeaseTokenInvalid(
            f"the lease token is for run {claims['r']}, not {run_id}", code="lease_token_other_run"
        )
    if time.time() - claims["i"] > MAX_TOKEN_AGE_S:
        raise LeaseTokenInvalid(
            f"the lease token is older than {MAX_TOKEN_AGE_S}s; claim the run again",
            code="lease_token_expired",
        )
    return Lease(run_id, tenant_id, int(claims["e"]), str(claims["o"]), float(claims["i"]), bool(claims.get("v")),
                 claims.get("p"))  # fmt: skip
