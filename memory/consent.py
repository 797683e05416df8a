"""Consent for memory: each claim's basis, the per-tenant policy of which basis a namespace needs,
and the queue of inferred claims waiting for the subject's (or a person's) confirmation."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from core.models import Tenant
from core.tenancy import tenant_scope

CONSENT_BASES = ("explicit", "contract", "legitimate_interest", "inferred")
# A held claim with this signal waits for confirmation, not for a poisoning review.
UNCONFIRMED = "unconfirmed"
# Words by which a user asks to be remembered: what they then say is kept on an explicit basis.
REMEMBER_CUES = ("remember", "запомни", "запомните", "记住", "記住")


class ConsentRequired(InvalidInput):
    code = "consent_required"


class ClaimPending(Conflict):
    """Not kept yet: an inferred claim waits for the subject's confirmation (202, like a held claim)."""

    code = "claim_pending_confirmation"
    http_status = 202


def consent_policy_parse(raw: str | dict[str, Any]) -> dict[str, dict[str, tuple[str, ...]]]:
    """KEEPER_CONSENT_POLICY: {"<tenant slug or *>": {"<namespace>": ["explicit", ...]}}. A namespace
    a tenant names overrides the "*" entry for it; a namespace nobody names accepts any basis."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise ImproperlyConfigured(f"KEEPER_CONSENT_POLICY is not JSON: {str(raw)[:200]!r}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured("KEEPER_CONSENT_POLICY must be a JSON object of tenants")
    policy: dict[str, dict[str, tuple[str, ...]]] = {}
    for tenant, rules in value.items():
        if not isinstance(rules, dict):
            raise ImproperlyConfigured(f"KEEPER_CONSENT_POLICY[{tenant!r}] must map namespaces to bases")
        policy[str(tenant)] = {}
        for namespace, bases in rules.items():
            bases = [bases] if isinstance(bases, str) else bases
            if not isinstance(bases, list) or not bases or any(b not in CONSENT_BASES for b in bases):
                raise ImproperlyConfigured(
                    f"KEEPER_CONSENT_POLICY[{tenant!r}][{namespace!r}] must list bases among "
                    f"{', '.join(CONSENT_BASES)}"
                )
            policy[str(tenant)][str(namespace)] = tuple(bases)
    return policy


@functools.lru_cache(maxsize=8)
def _policy(raw: str) -> dict[str, dict[str, tuple[str, ...]]]:
    return consent_policy_parse(raw)  # parsed once per setting's text, not on every write


def consent_required(*, tenant: Tenant, namespace: str) -> tuple[str, ...] | None:
    """The bases a claim in `namespace` of this tenant may have; None: any."""
    policy = _policy(settings.KEEPER_CONSENT_POLICY)
    for scope in (tenant.slug, "*"):
        if namespace in policy.get(scope, {}):
            return policy[scope][namespace]
    return None


def consent_default(provenance: dict[str, Any]) -> str:
    """The basis of a write that named none: a model's inference is inferred, a user's own statement
    explicit, an operator's entry, a tool's result or an import the tenant's legitimate interest."""
    if provenance.get("validation_method") == "explicit_user_confirmation":
        return "explicit"
    source_type = provenance.get("source_type")
    if source_type == "model_inference":
        return "inferred"
    if source_type == "user_statement":
        return "explicit"
    return "legitimate_interest"


def consent_basis_of_statement(text: str, *, explicit: bool) -> str:
    """Learning from a conversation: "explicit" when the user asked to be remembered, else inferred."""
    lowered = text.lower()
    return "explicit" if explicit and any(cue in lowered for cue in REMEMBER_CUES) else "inferred"


def consent_check(*, tenant: Tenant, namespace: str, consent_basis: str) -> bool:
    """True if the claim may be kept now; False if it must wait for confirmation (an inferred claim
    where the policy needs another basis). Any other basis the policy does not accept is refused."""
    if consent_basis not in CONSENT_BASES:
        raise InvalidInput(
            f"consent_basis must be one of {', '.join(CONSENT_BASES)}", code="invalid_consent_basis"
        )
    needed = consent_required(tenant=tenant, namespace=namespace)
    if needed is None or consent_basis in needed:
        return True
    if consent_basis == "inferred":
        return False
    raise ConsentRequired(
        f"claims in {namespace} need consent basis {' or '.join(needed)}, not {consent_basis}",
        details={"required": list(needed)},
    )


def pending_hold(
    *, tenant: Tenant, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> ClaimPending:
    """Queue an inferred claim for confirmation (inside the tenant's scope); the error to raise."""
    from memory.poisoning.hold import held_claim_create

    held = held_claim_create(
        tenant=tenant,
        subject_id=subject_id,
        namespace=namespace,
        key=key,
        value=value,
        provenance=provenance,
        signals=[UNCONFIRMED],
    )
    expires = held.created_at + timedelta(hours=settings.KEEPER_CONSENT_PENDING_TTL_HOURS)
    return ClaimPending(
        f"{namespace}/{key} is an inference this tenant keeps only once the subject confirms it: "
        "waiting for confirmation, not kept",
        details={"pending_id": str(held.held_id), "expires_at": expires.isoformat()},
    )


def pending_expiry_cutoff() -> Any:
    return timezone.now() - timedelta(hours=settings.KEEPER_CONSENT_PENDING_TTL_HOURS)


def pending_purge_expired() -> int:
    """Delete inferred claims nobody confirmed within KEEPER_CONSENT_PENDING_TTL_HOURS (beat task)."""
    from memory.poisoning.models import HeldClaim, HeldStatus

    purged = 0
    for tenant_id in Tenant.objects.values_list("tenant_id", flat=True):
        with tenant_scope(tenant_id):
            purged += (
                HeldClaim.objects.filter(
                    status=HeldStatus.HELD,
                    signals__contains=[UNCONFIRMED],
                    created_at__lt=pending_expiry_cutoff(),
                )
                .delete()[1]
                .get("memory.HeldClaim", 0)
            )
    return purged
