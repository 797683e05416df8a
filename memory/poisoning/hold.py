"""The write side of the review queue: a memory write's trust level, and holding a claim that waits."""

from __future__ import annotations

from typing import Any

from core.errors import Conflict
from core.models import Tenant
from memory.poisoning.models import UNCONFIRMED, HeldClaim, Trust


class ClaimHeld(Conflict):
    """Not kept: held for a person's review. 202: the write was accepted, for review, not stored."""

    code = "claim_held_for_review"
    http_status = 202


def trust_of(provenance: dict[str, Any]) -> str:
    """How far a claim's source is trusted: an operator's entry high, a tool's verified result or an
    import medium, a user's statement or a model's inference low."""
    source_type = provenance.get("source_type")
    if source_type == "operator" or provenance.get("validation_method") == "operator_entered":
        return Trust.HIGH
    if source_type in ("tool_result", "import"):
        return Trust.MEDIUM
    return Trust.LOW


def held_claim_build(
    *,
    tenant: Tenant,
    subject_id: str,
    namespace: str,
    key: str,
    value: Any,
    provenance: dict[str, Any],
    signals: list[str],
    consent_basis: str | None = None,
) -> HeldClaim:
    """A claim kept out of memory, waiting for a person (poisoning signals) or for the subject's
    confirmation (`unconfirmed`); its source and trust come from its provenance. Not saved yet."""
    return HeldClaim(
        tenant=tenant,
        subject_id=subject_id,
        namespace=namespace,
        key=key,
        value=value,
        provenance=provenance,
        source=str(provenance.get("source_id") or ""),
        trust=trust_of(provenance),
        signals=signals,
        consent_basis=consent_basis,
    )


def claim_held_error(held: HeldClaim) -> ClaimHeld:
    kinds = " and ".join(s.replace("_", " ") for s in held.signals if s != UNCONFIRMED)
    also = " (it also needs the subject's consent)" if UNCONFIRMED in held.signals else ""
    return ClaimHeld(
        f"{held.namespace}/{held.key} looks like {kinds}: held for review, not kept{also}",
        details={"held_id": str(held.held_id), "signals": held.signals, "trust": held.trust},
    )
