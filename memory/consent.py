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
from memory.poisoning.models import UNCONFIRMED
from memory.sensitive import CATEGORIES, namespace_path

CONSENT_BASES = ("explicit", "contract", "legitimate_interest", "inferred")
# Words by which a user asks to be remembered: what they then say is kept on an explicit basis.
REMEMBER_CUES = ("remember", "запомни", "запомните", "记住", "記住")
# What a sensitive category needs when no policy entry names it: the person's explicit consent.
SENSITIVE_DEFAULT = ("explicit",)


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


def consent_required(
    *, tenant: Tenant, namespace: str, categories: frozenset[str] = frozenset()
) -> tuple[str, ...] | None:
    """The bases a claim of this tenant in `namespace`, touching these sensitive `categories`, may
    have; None: any. A policy entry names a sensitive category (memory/sensitive.py) or a namespace,
    which covers its children however spelled ("health" covers "Health", "health.conditions",
    "health/x"); a category no entry names needs `explicit`. The tenant's entry for a name overrides
    the "*" one; where several entries apply, a basis must satisfy each."""
    policy = _policy(settings.KEEPER_CONSENT_POLICY)
    rules = {**policy.get("*", {}), **policy.get(tenant.slug, {})}
    path = namespace_path(namespace)
    needed: list[tuple[str, ...]] = []
    for name, bases in rules.items():
        if name in CATEGORIES:
            if name in categories:
                needed.append(bases)
            continue
        named = namespace_path(name)
        if named and path[: len(named)] == named:
            needed.append(bases)
    needed += [SENSITIVE_DEFAULT for category in categories if category not in rules]
    if not needed:
        return None
    return tuple(b for b in CONSENT_BASES if all(b in bases for bases in needed))


def consent_default(provenance: dict[str, Any]) -> str | None:
    """The basis of a write that named none. Only what the writer did say: a claim the person
    confirmed is explicit, a model's inference is inferred (no consent, a guess); anything else has
    no basis (None, shown as "unknown"), which no rule of the policy accepts."""
    if provenance.get("validation_method") == "explicit_user_confirmation":
        return "explicit"
    if provenance.get("source_type") == "model_inference":
        return "inferred"
    return None


def consent_basis_of_statement(text: str, *, explicit: bool) -> str:
    """Learning from a conversation: "explicit" when the user asked to be remembered, else inferred."""
    lowered = text.lower()
    return "explicit" if explicit and any(cue in lowered for cue in REMEMBER_CUES) else "inferred"


def consent_check(
    *,
    tenant: Tenant,
    namespace: str,
    consent_basis: str | None,
    categories: frozenset[str] = frozenset(),
) -> bool:
    """True if the claim may be kept now; False if it must wait for the subject's confirmation (an
    inferred claim, or one without a basis, where the policy needs a basis). Any other basis the
    policy does not accept is refused (ConsentRequired)."""
    if consent_basis is not None and consent_basis not in CONSENT_BASES:
        raise InvalidInput(
            f"consent_basis must be one of {', '.join(CONSENT_BASES)}", code="invalid_consent_basis"
        )
    needed = consent_required(tenant=tenant, namespace=namespace, categories=categories)
    if needed is None or consent_basis in needed:
        return True
    if consent_basis in (None, "inferred"):
        return False
    what = f"claims in {namespace}" + (f" ({', '.join(sorted(categories))})" if categories else "")
    raise ConsentRequired(
        f"{what} need consent basis {' or '.join(needed) or '(none: the policy rules disagree)'}, "
        f"not {consent_basis}",
        details={"required": list(needed), "categories": sorted(categories)},
    )


def pending_error(held: Any) -> ClaimPending:
    """The answer to a write whose claim now waits for the subject's confirmation (held with the
    `unconfirmed` signal by the caller, inside the tenant's scope)."""
    expires = held.created_at + timedelta(hours=settings.KEEPER_CONSENT_PENDING_TTL_HOURS)
    return ClaimPending(
        f"{held.namespace}/{held.key} needs the subject's consent before it is kept: waiting for "
        "their confirmation, not kept",
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
                    # Only what waits for consent alone: a claim the screen also held waits for a
                    # person's review, and stays the evidence a rollback by source needs.
                    signals=[UNCONFIRMED],
                    created_at__lt=pending_expiry_cutoff(),
                )
                .delete()[1]
                .get("memory.HeldClaim", 0)
            )
    return purged
