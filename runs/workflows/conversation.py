"""A conversational run: answers user messages one at a time, in the order they were stored.

Turns of one session never interleave: messages are appended with increasing seq, and the run's
lease lets one worker answer at a time, each answer built from the context up to its message.
The responder is settings.BACKENDS["responder"] (default: the deterministic RuleResponder, which
says what it is); a model-backed one plugs in there the same way.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.backends import backend_build
from runs.conversations.context import BuiltContext, context_build
from runs.conversations.messages import AWAITING_INPUT, conversation_next_unanswered
from runs.engine.authoring import Context, State, StepResult, workflow
from runs.engine.dispatch import task_enqueue
from runs.engine.models import AgentRun


class Responder(Protocol):
    name: str

    def respond(self, *, context: BuiltContext, message: str) -> str: ...


class RuleResponder:
    """No model: acknowledges the message and repeats what the context carries structurally, so a
    person can see that amounts, ids and constraints survived compaction."""

    name = "rules-v1"

    def respond(self, *, context: BuiltContext, message: str) -> str:
        carried = [m["content"] for m in context.messages if m["content"].startswith("[structured carry")]
        lines = [f"Noted: {message[:200]}"]
        if carried:
            lines.append(carried[0].splitlines()[1][:1000])
        lines.append(
            f"(context: {context.total} of {context.budget} tokens; {len(context.summaries)} summaries)"
        )
        return "\n".join(lines)


def responder_from_settings() -> Responder:
    """The responder settings.BACKENDS["responder"] names."""
    return backend_build("responder")


conversation_flow = workflow(
    "conversation",
    version="1",
    description="Answers user messages in order, with a token-budgeted, compacted context.",
)


@conversation_flow.step
def respond(ctx: Context, state: State) -> StepResult:
    # Answered is what this run's own replies say (a fork's copies are renumbered to its seqs),
    # not a position that may have been counted in a parent's seqs.
    message = conversation_next_unanswered(run_id=ctx.run_id)
    if message is None:
        return ctx.suspend(state, AWAITING_INPUT, "waiting for the next user message")
    run = AgentRun.objects.get(run_id=ctx.run_id)
    context = context_build(run=run, system_prompt=state.get("system_prompt", ""), up_to_seq=message.seq)
    responder = responder_from_settings()
    reply = responder.respond(context=context, message=message.payload.get("content", "[erased]"))
    said: dict[str, Any] = {
        "content": reply,
        "in_reply_to": message.seq,
        "responder": responder.name,
        "context_tokens": context.parts,
    }
    # What the user said about themselves may be worth keeping (preferences, constraints): a
    # background task extracts it with provenance; doing it twice keeps the same claims.
    task_enqueue(name="workers.tasks.learn_from_run", args=[str(ctx.run_id)])
    return ctx.next(respond, {**state, "answered_through": message.seq}, say=("assistant_message", said))


conversation = conversation_flow.register()
