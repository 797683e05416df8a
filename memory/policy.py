"""Memory's write policy, decided before anything is written: is the claim well formed, may it be
kept at all, does it wait for a person (the poisoning screen) or for the subject (consent)?

Every write path (the API, write_memory and ctx.remember, MEMORY.md, learning, the LangGraph store)
asks `claim_admit`, one claim at a time, and writes only what it admits. The rules:
- a claim in a sensitive category (memory/sensitive.py: however its namespace or key is spelled)
  needs the basis the consent policy names for that category, `explicit` unless the tenant's
  policy says otherwise, whatever its source; a model's inference there is refused outright;
- a reading of a person's state of mind (angry, anxious...) by anyone but that person is not
  long-term memory: refused, however namespaced;
- trust comes from the writer: only a person signed in with a role may write as an operator (an
  API key that declares itself one is refused), and every other writer's claims are screened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.digests import canonical_json
from core.errors import ApplicationError, InvalidInput
from core.models import Tenant
from memory.consent import consent_check, consent_default
from memory.item_schema import item_schema_current
from memory.models import PROVENANCE_KEYS
from memory.poisoning.hold import trust_of
from memory.poisoning.models import Trust
from memory.poisoning.screen import screen_claim
from memory.sensitive import STATE_OF_MIND, claim_categories, states_of_mind_in

SOURCE_TYPES = ("user_statement", "tool_result", "model_inference", "operator", "import")
VALIDATION_METHODS = (
    "explicit_user_confirmation",
    "user_statement",
    "tool_verified",
    "operator_entered",
    "unvalidated",
)


class SensitiveInference(InvalidInput):
    code = "sensitive_inference_refused"


class StateOfMindNotKept(SensitiveInference):
    """A kind of sensitive inference, refused from every writer but the person themselves."""

    code = "state_of_mind_not_kept"


class OperatorProvenanceRefused(ApplicationError):
    code = "operator_provenance_refused"
    http_status = 403


class ConfirmationProvenanceRefused(ApplicationError):
    code = "confirmation_provenance_refused"
    http_status = 403


@dataclass(frozen=True)
class Admission:
    """What the policy says of one claim that may be kept: with which basis and schema version, and
    whether it waits (poison: the screen's signals, for a person's review; unconfirmed: the consent
    policy wants the subject's confirmation first). Neither: it is written at once."""

    consent_basis: str | None
    schema_version: int
    categories: frozenset[str]
    poison: tuple[str, ...] = ()
    unconfirmed: bool = False

    @property
    def waits(self) -> bool:
        return bool(self.poison) or self.unconfirmed


def provenance_of_writer(provenance: Any, *, operator: bool) -> None:
    """Refuse a provenance that claims more trust than its writer has: only a person signed in with
    a role (the console, a staff session) writes as an operator, never an API key; and a key cannot
    say the person confirmed a claim (that makes a sensitive inference `explicit`, kept for good):
    Keeper records the confirmation itself, when the subject confirms the held claim."""
    if operator or not isinstance(provenance, dict):
        return
    if provenance.get("validation_method") == "explicit_user_confirmation":
        raise ConfirmationProvenanceRefused(
            "an API key cannot say the person confirmed a claim (validation_method "
            "explicit_user_confirmation): write it without, and a claim the consent policy holds "
            "answers 202 with details.pending_id for the subject to confirm at "
            "POST /api/v1/memory/pending/{id}/confirm"
        )
    if (
        provenance.get("source_type") == "operator"
        or provenance.get("validation_method") == "operator_entered"
    ):
        raise OperatorProvenanceRefused(
            "an API key cannot write as an operator (source_type operator, validation_method "
            "operator_entered): operators are people signed in to the console; name the source the key "
            "speaks for (user_statement, tool_result, model_inference or import)"
        )


def claim_validate(
    *, namespace: str, key: str, value: Any, provenance: dict[str, Any], confidence: float | None
) -> None:
    """The claim's shape: InvalidInput naming the first thing wrong."""
    for name, text in (("namespace", namespace), ("key", key)):
        if not isinstance(text, str) or not 0 < len(text) <= 200:
            raise InvalidInput(f"{name} must be 1 to 200 characters", code="invalid_memory_scope")
    canonical_json(value)  # plain JSON, storable
    if not isinstance(provenance, dict) or sorted(set(PROVENANCE_KEYS) - set(provenance)):
        missing = sorted(set(PROVENANCE_KEYS) - set(provenance or {}))
        raise InvalidInput(
            f"provenance needs {', '.join(PROVENANCE_KEYS)} (missing {', '.join(missing)})",
            code="invalid_provenance",
        )
    if provenance["source_type"] not in SOURCE_TYPES:
        raise InvalidInput(
            f"provenance.source_type must be one of {', '.join(SOURCE_TYPES)}", code="invalid_provenance"
        )
    if provenance["validation_method"] not in VALIDATION_METHODS:
        raise InvalidInput(
            f"provenance.validation_method must be one of {', '.join(VALIDATION_METHODS)}",
            code="invalid_provenance",
        )
    if not isinstance(provenance["source_id"], str) or not provenance["source_id"]:
        raise InvalidInput("provenance.source_id must name the source", code="invalid_provenance")
    seq = provenance["event_seq"]
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63):
        raise InvalidInput(
            "provenance.event_seq must be a whole number from 0 (an event's seq) or null",
            code="invalid_provenance",
        )
    for name in ("source_version", "run_id"):
        given = provenance[name]
        if given is not None and (not isinstance(given, str) or len(given) > 200):
            raise InvalidInput(
                f"provenance.{name} must be text of at most 200 characters or null", code="invalid_provenance"
            )
    if confidence is not None and not 0 <= confidence <= 1:
        raise InvalidInput("confidence must be between 0 and 1", code="invalid_confidence")


def persons_own_word(provenance: dict[str, Any], consent_basis: str | None) -> bool:
    """Whether the claim is the person's own word: they confirmed it, or it is what they stated and
    the writer says they consented explicitly. Anything else is someone's reading of the person."""
    if provenance.get("validation_method") == "explicit_user_confirmation":
        return True
    return consent_basis == "explicit" and provenance.get("source_type") != "model_inference"


def claim_admit(
    *,
    tenant: Tenant,
    namespace: str,
    key: str,
    value: Any,
    provenance: dict[str, Any],
    confidence: float | None = None,
    consent_basis: str | None = None,
    schema_version: int | None = None,
    reviewed: bool = False,
) -> Admission:
    """May this claim be kept, and how? Raises what refuses it (InvalidInput and its kinds,
    ConsentRequired); else the Admission. No database write. `reviewed`: a person approved it from
    the review queue, so the poisoning screen has had its say."""
    claim_validate(namespace=namespace, key=key, value=value, provenance=provenance, confidence=confidence)
    basis = consent_basis or consent_default(provenance)
    categories = claim_categories(namespace=namespace, key=key)
    own_word = persons_own_word(provenance, basis)
    if not own_word and (STATE_OF_MIND in categories or states_of_mind_in(value)):
        raise StateOfMindNotKept(
            f"{namespace}/{key} reads how the person feels; only what they say about themselves, with "
            "their explicit consent, is kept as long-term memory (keep a guess about their mood in "
            "the run's own state for this session)",
            details={"categories": sorted(categories | {STATE_OF_MIND})},
        )
    if (
        categories
        and provenance["source_type"] == "model_inference"
        and provenance["validation_method"] != "explicit_user_confirmation"
    ):
        raise SensitiveInference(
            f"a model's inference about {namespace}/{key} ({', '.join(sorted(categories))}) is not kept "
            "without the person's explicit confirmation",
            details={"categories": sorted(categories)},
        )
    kept_now = consent_check(tenant=tenant, namespace=namespace, categories=categories, consent_basis=basis)
    poison: tuple[str, ...] = ()
    if not reviewed and trust_of(provenance) != Trust.HIGH:
        poison = tuple(screen_claim(namespace=namespace, key=key, value=value))
    return Admission(
        consent_basis=basis,
        # A new value is written in its namespace's current schema version (memory/item_schema.py).
        schema_version=schema_version or item_schema_current(namespace),
        categories=categories,
        poison=poison,
        unconfirmed=not kept_now,
    )
