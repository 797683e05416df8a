"""What Keeper holds about a person, in words a compliance officer reads without knowing the tables:
their conversations, the facts remembered about them (with where each came from), their other runs,
and what waits on them (live runs and pending approvals, which an erasure closes for good). Built
from the subject's overview (console.selectors.subject_overview); the tables stay below, folded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from console.approvals import ApprovalReading, approval_reading
from console.display import clip
from console.selectors import SubjectOverview
from runs.engine.selectors import approval_pending_for_runs
from runs.kernel.models import SUBJECT_ERASED, Approval, RunStatus

LIVE = (RunStatus.RUNNING, RunStatus.SUSPENDED)


@dataclass(frozen=True)
class Remembered:
    """A current memory claim: what is remembered and where it came from."""

    scope: str  # "preference / language"
    value: str
    source: str  # "their own words", "a model's inference"...
    run_id: str  # the run it came from ("" when none)
    event_seq: int | None
    earlier: int  # how many claims it replaced


@dataclass(frozen=True)
class RunInWords:
    run_id: UUID
    what: str  # "a support_agent conversation, 5 messages"
    status: str  # "waiting for a person to approve the request", "completed"...
    live: bool


@dataclass
class SubjectInWords:
    conversations: list[RunInWords] = field(default_factory=list)
    other_runs: list[RunInWords] = field(default_factory=list)
    remembered: list[Remembered] = field(default_factory=list)
    forgotten_claims: int = 0  # superseded, invalidated or expired claims still stored
    waiting: list[RunInWords] = field(default_factory=list)  # live runs an erasure stops for good
    approvals: list[tuple[Approval, ApprovalReading]] = field(default_factory=list)  # it closes these
    elsewhere: list[tuple[str, int]] = field(default_factory=list)  # other places holding their data
    erased_before: int = 0  # earlier erasure requests

    @property
    def nothing(self) -> bool:
        return not (
            self.conversations
            or self.other_runs
            or self.remembered
            or self.forgotten_claims
            or self.elsewhere
        )


_SOURCES = {
    "user_statement": "their own words",
    "model_inference": "a model's inference",
    "tool_result": "a tool's answer",
    "document": "a document",
    "operator": "a staff member",
}
# Places the sections above already put in words: their memory, and their runs with everything
# kept of them. The other places are named in words where a prefix says what they are.
_TOLD = ("memory_", "agent_", "summaries", "approvals", "tool_operations", "langgraph_", "runs.")
_ELSEWHERE = (
    ("console_audit_log", "notes staff wrote about them in the audit log"),
    ("retrieval_", "documents in the search index"),
    ("webhook", "webhook subscriptions"),
)


def _status(run: Any) -> str:
    if run.status == RunStatus.SUSPENDED:
        return clip(run.suspend_detail or run.suspend_reason or "waiting", 160)
    return str(run.status)


def subject_in_words(overview: SubjectOverview) -> SubjectInWords:
    words = SubjectInWords(erased_before=len(overview.erasures))
    for entry in overview.runs:
        run = entry.run
        live = run.status in LIVE and run.suspend_reason != SUBJECT_ERASED
        if entry.conversation_events:
            what = f"a {run.workflow_name} conversation, {entry.conversation_events} message{'s' if entry.conversation_events != 1 else ''}"
            shown = RunInWords(run.run_id, what, _status(run), live)
            words.conversations.append(shown)
        else:
            shown = RunInWords(run.run_id, f"a {run.workflow_name} run", _status(run), live)
            words.other_runs.append(shown)
        if live:
            words.waiting.append(shown)
    for chain in overview.chains:
        current = [c for c in chain.claims if c.state == "current"]
        words.forgotten_claims += len(chain.claims) - len(current)
        for claim in current:
            provenance = claim.item.provenance if isinstance(claim.item.provenance, dict) else {}
            seq = provenance.get("event_seq")
            words.remembered.append(
                Remembered(
                    scope=f"{chain.namespace} / {chain.key}",
                    value=clip(claim.value_text.strip().strip('"'), 300),
                    source=_SOURCES.get(
                        str(provenance.get("source_type", "")),
                        str(provenance.get("source_type") or "unknown"),
                    ),
                    run_id=str(provenance.get("run_id") or ""),
                    event_seq=seq if isinstance(seq, int) else None,
                    earlier=len(chain.claims) - 1,
                )
            )
    if words.waiting:
        pending = approval_pending_for_runs(
            tenant_id=overview.tenant.tenant_id, run_ids=[w.run_id for w in words.waiting]
        )
        words.approvals = [(a, approval_reading(a)) for a in pending]
    elsewhere: dict[str, int] = {}
    for place in overview.places:
        if not place.count or place.key.startswith(_TOLD):
            continue
        what = next((words_ for prefix, words_ in _ELSEWHERE if place.key.startswith(prefix)), "")
        what = what or "other places (named in the technical detail below)"
        elsewhere[what] = elsewhere.get(what, 0) + place.count
    words.elsewhere = sorted(elsewhere.items())
    return words


def places_left_in_words(places: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a failed erasure left, one line per thing a person does: the receipt's places still
    holding the subject, grouped by their remedy (one document shows in four columns of the knowledge
    base, and is one thing to delete), each with what it is, how much is left and where."""
    groups: dict[str, dict[str, Any]] = {}
    for place in places:
        name, what = str(place.get("place", "")), str(place.get("what", ""))
        todo = str(place.get("what_to_do") or "")
        group = groups.setdefault(
            todo or f"place:{name}",
            # The description without its leading column name ("retrieval_chunks.text: the knowledge base…").
            {"what": what.removeprefix(f"{name}: "), "what_to_do": todo, "places": [], "left": 0, "runs": []},
        )
        group["places"].append(name)
        group["left"] += int(place.get("after") or 0)
        group["runs"] += [r for r in place.get("runs") or [] if r not in group["runs"]]
    for group in groups.values():
        if len(group["places"]) == 1:
            group["what"] = next(
                str(p.get("what", "")) for p in places if p.get("place") == group["places"][0]
            )
    return list(groups.values())
