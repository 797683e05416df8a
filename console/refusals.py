"""A refused resume in words a support agent reads: what went wrong, and whether they can do anything
about it (most refusals need an engineer: a plain resume would only be refused again)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Refusal code -> (what happened, in words; who can fix it).
_WORDS: dict[str, tuple[str, str]] = {
    "state_digest_mismatch": (
        "The run's saved state was changed outside Keeper after its last step.",
        "engineer",
    ),
    "history_mismatch": ("The run's history no longer matches what was committed.", "engineer"),
    "event_seq_gap": ("Events are missing from the run's history.", "engineer"),
    "unsupported_checkpoint": (
        "The run was saved by a newer version of its workflow than the one running now (a rollback).",
        "engineer",
    ),
    "workflow_version_unavailable": (
        "The version of the workflow this run started on is no longer deployed.",
        "engineer",
    ),
    "unknown_step": ("The run's next step no longer exists in its workflow.", "engineer"),
    "tenant_unknown": ("The run's tenant no longer exists.", "engineer"),
    "tool_contract_changed": ("A tool the run used has changed its contract since.", "engineer"),
    "source_changed": ("A document the run relied on has changed since.", "engineer"),
    "approval_expired": ("The approval it needs has expired: it must be asked again.", "engineer"),
    "approval_missing": ("The approval it needs cannot be found.", "engineer"),
    "approval_digest_mismatch": ("The approval it holds was given for another request.", "engineer"),
    "budget_exhausted": ("It has used up its budget (steps, tokens, cost or time).", "engineer"),
    "deadline_passed": ("Its deadline has passed.", "engineer"),
    "reconciliation_required": (
        "An operation's outcome is unknown: reconcile it (support can), then it goes on.",
        "support",
    ),
}


@dataclass(frozen=True)
class RefusalWords:
    code: str
    words: str
    engineer_only: bool


def refusal_in_words(refusal: dict[str, Any]) -> RefusalWords:
    """`refusal`: console.display.refusal_of's answer for a resume_refused event."""
    check = refusal.get("check") or {}
    code = str(check.get("code") or "")
    words, who = _WORDS.get(
        code, (f"A check before it may continue failed ({check.get('name') or code}).", "engineer")
    )
    return RefusalWords(code=code, words=words, engineer_only=who == "engineer")
