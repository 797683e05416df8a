"""Learning from a run's conversation for the run's subject: semantic facts and the session's episode."""

from __future__ import annotations

import logging
import re
from typing import Any
from uuid import UUID

from django.utils import timezone

from core.tenancy import run_tenant, tenant_bind
from memory.extraction import _GUARDS  # the guards fact extraction applies (no public name yet)
from memory.services import ClaimErased, memory_learn_from_events, memory_remember
from runs.engine.charges import model_calls_charged
from runs.engine.selectors import run_get
from runs.kernel.budgets import BudgetExhausted
from runs.kernel.errors import RunNotFound
from runs.kernel.models import AgentEvent, AgentRun

logger = logging.getLogger(__name__)

EPISODE_NAMESPACE = "episode"
EPISODE_ITEMS = 10  # the newest requests and actions an episode keeps
EPISODE_TEXT = 200
_FIRST_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")
WITHHELD = "[withheld: not kept in memory]"
_COMMITMENT = re.compile(r"\b(?:I will|I'll|I’ll|decided|approved|refunded|done|sent)\b", re.IGNORECASE)


def run_learn(*, run_id: UUID) -> dict[str, int]:
    """Extract candidate facts from the run's user messages and keep them with provenance; record
    the session's episode (what was asked, what was done) as one memory item of the subject."""
    tenant_id = run_tenant(run_id)  # row-level security: work as the run's tenant
    if tenant_id is None:
        raise RunNotFound(f"no run {run_id}")
    with tenant_bind(tenant_id):
        return _run_learn(run_id=run_id)


def _run_learn(*, run_id: UUID) -> dict[str, int]:
    run = run_get(run_id=run_id)
    # An evaluation's replay is not the customer's conversation: nothing it said or did is kept.
    if not run.subject or run.replay:
        return {"kept": 0, "unchanged": 0, "erased": 0, "refused": 0, "episode": 0}
    events = [
        {"seq": e.seq, "event_type": e.event_type, "payload": e.payload}
        for e in AgentEvent.objects.filter(run=run, event_type="user_message")
        .exclude(payload__has_key="redacted")
        .order_by("seq")
    ]
    try:
        with model_calls_charged(run_id=run.run_id, actor="system:extractor"):  # the model extractor's call
            counts = memory_learn_from_events(
                tenant=run.tenant, subject_id=run.subject, run_id=str(run.run_id), events=events
            )
    except BudgetExhausted as exc:  # the run's budget is spent: no model call, the episode is still kept
        logger.warning("run %s: no facts extracted: %s", run.run_id, exc.message)
        counts = {"kept": 0, "unchanged": 0, "erased": 0, "refused": 0}
    outcome = episode_record(run=run)
    if outcome in counts:  # the episode is one more item kept (or unchanged, or erased) for the subject
        counts[outcome] += 1
    return {**counts, "episode": int(outcome == "kept")}


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EPISODE_TEXT else text[: EPISODE_TEXT - 1] + "…"


def _quotable(sentence: str) -> str:
    """The sentence, clipped; or WITHHELD if it touches sensitive traits or reads as an instruction
    about roles, permissions or rules: an episode is recalled into later sessions, so it must not
    carry what extraction refuses to keep ("remember that I am the admin")."""
    if _GUARDS["sensitive"].search(sentence) or _GUARDS["directive"].search(sentence):
        return WITHHELD
    return _clip(sentence)


def _first_sentence(text: str) -> str:
    match = _FIRST_SENTENCE.search(text or "")
    return _quotable(match.group() if match else "")


def episode_of(run: AgentRun) -> dict[str, Any] | None:
    """What the session was asked and what it did, from its events (seq cited for each line); None
    when nobody asked anything yet."""
    rows = (
        AgentEvent.objects.filter(
            run=run,
            event_type__in=(
                "user_message",
                "assistant_message",
                "tool_call",
                "approval_approved",
                "approval_rejected",
                "operation_reconciled",
            ),
        )
        .exclude(payload__has_key="redacted")
        .order_by("seq")
        .values_list("seq", "event_type", "payload")
    )
    asked: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    # What the assistant said it would do or did is its claim, kept apart from what Keeper recorded
    # being done (a tool call, a decision, a reconciliation): else "I will send you a free replacement
    # laptop" is recalled in later sessions among the things done.
    said_by_assistant: list[dict[str, Any]] = []
    for seq, kind, payload in rows:
        content = payload.get("content") if isinstance(payload.get("content"), str) else ""
        if kind == "user_message" and content:
            asked.append({"seq": seq, "text": _first_sentence(content)})
        elif kind == "assistant_message":
            said = [s for s in _FIRST_SENTENCE.findall(content) if _COMMITMENT.search(s)]
            said_by_assistant += [{"seq": seq, "text": _quotable(s)} for s in said[:2]]
        elif kind == "tool_call":
            done.append({"seq": seq, "text": f"called {payload.get('tool')} ({payload.get('call_id')})"})
        elif kind.startswith("approval_"):
            done.append(
                {
                    "seq": seq,
                    "text": f"approval {payload.get('approval_id')} {kind.removeprefix('approval_')}",
                }
            )
        else:
            outcome = payload.get("outcome") or "unknown"
            done.append(
                {"seq": seq, "text": f"operation {payload.get('operation_id')} reconciled: {outcome}"}
            )
    if not asked:
        return None
    return {
        "workflow": run.workflow_name,
        "requests": len(asked),
        "asked": asked[-EPISODE_ITEMS:],
        "done": done[-EPISODE_ITEMS:],
        "assistant_said_unverified": said_by_assistant[-EPISODE_ITEMS:],
    }


def episode_record(*, run: AgentRun) -> str:
    """Keep (or bring up to date) the run's episode as the subject's memory item episode/run:<id>,
    with the run and its last cited event as provenance: "kept", "unchanged", "erased" (the person
    had it erased) or "none" (nothing asked yet, or no subject)."""
    episode = episode_of(run) if run.subject else None
    if episode is None or not run.subject:
        return "none"
    last = max(
        line["seq"] for line in [*episode["asked"], *episode["done"], *episode["assistant_said_unverified"]]
    )
    started = timezone.now()
    try:
        item = memory_remember(
            tenant=run.tenant,
            subject_id=run.subject,
            namespace=EPISODE_NAMESPACE,
            key=f"run:{run.run_id}",
            value=episode,
            # Keeper's own record of the run, built by code from committed events (each line cites
            # its seq): no model read it and nobody needs to confirm it. What it verifies is that
            # these were asked, done and said; the assistant's own words stay labelled as unverified.
            provenance={
                "source_type": "tool_result",
                "source_id": f"run:{run.run_id}",
                "source_version": str(last),
                "run_id": str(run.run_id),
                "event_seq": last,
                "validation_method": "tool_verified",
                "kind": "episode",
            },
        )
    except ClaimErased:
        return "erased"
    return "kept" if item.created_at >= started else "unchanged"  # the same episode again is not new
