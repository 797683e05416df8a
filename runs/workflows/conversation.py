"""A conversational run: answers user messages one at a time, in the order they were stored.

Turns of one session never interleave: messages are appended with increasing seq, and the run's
lease lets one worker answer at a time, each answer built from the context up to its message.
The responder is settings.BACKENDS["responder"] (default: the deterministic RuleResponder, which
says what it is); a model-backed one plugs in there the same way. Each conversation workflow has
its ConversationConfig: the context's budget per part, and whether a turn searches the tenant's
documents (as the run's input "principal", through the ACL-checked retrieval search).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.backends import backend_build
from core.errors import InvalidInput
from runs.authoring import (
    AWAITING_INPUT,
    DEFAULT_BUDGET,
    AgentRun,
    BuiltContext,
    Context,
    ContextBudget,
    State,
    StepResult,
    Workflow,
    context_build,
    conversation_next_unanswered,
    task_enqueue,
    workflow,
)


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


@dataclass(frozen=True)
class ConversationConfig:
    """What one conversation workflow puts in its context. budget: tokens per part (memory,
    retrieval, recent messages, tool schemas, output), as the use case needs them. documents: each
    turn searches the tenant's documents for the user's message as the run's "principal" (input);
    a run without one gets no documents. model: the token counter's model (None: KEEPER_MODEL)."""

    budget: ContextBudget = field(default_factory=lambda: DEFAULT_BUDGET)
    documents: bool = False
    model: str | None = None


CONVERSATION_CONFIGS: dict[str, ConversationConfig] = {}


def _validate_input(state: State) -> None:
    for key in ("system_prompt", "principal"):
        value = state.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > 10_000):
            raise InvalidInput(
                f"input {key} must be a text of at most 10000 characters", code="invalid_input"
            )
    principal = state.get("principal")
    if principal is not None and not 0 < len(principal) <= 210:
        raise InvalidInput("input principal must be 1 to 210 characters", code="invalid_input")


def respond(ctx: Context, state: State) -> StepResult:
    # Answered is what this run's own replies say (a fork's copies are renumbered to its seqs),
    # not a position that may have been counted in a parent's seqs.
    message = conversation_next_unanswered(run_id=ctx.run_id)
    if message is None:
        return ctx.suspend(state, AWAITING_INPUT, "waiting for the next user message")
    run = AgentRun.objects.get(tenant_id=ctx.tenant_id, run_id=ctx.run_id)
    config = CONVERSATION_CONFIGS.get(ctx.engine.workflow.name) or ConversationConfig()
    text = message.payload.get("content", "[erased]")
    context = context_build(
        run=run,
        system_prompt=state.get("system_prompt", ""),
        up_to_seq=message.seq,
        query=text if "content" in message.payload else "",
        budget=config.budget,
        model=config.model,
        principal=state.get("principal") if config.documents else None,
    )
    responder = responder_from_settings()
    reply = responder.respond(context=context, message=text)
    said: dict[str, Any] = {
        "content": reply,
        "in_reply_to": message.seq,
        "responder": responder.name,
        "context_tokens": context.parts,
        "procedure": context.procedure,
    }
    # What the user said about themselves may be worth keeping (preferences, constraints): a
    # background task extracts it with provenance; doing it twice keeps the same claims.
    task_enqueue(name="workers.tasks.learn_from_run", args=[str(ctx.run_id)])
    # The tool calls a client recorded for this request may be how such requests are done.
    task_enqueue(name="workers.tasks.learn_procedures", args=[str(ctx.run_id)])
    return ctx.next(respond, {**state, "answered_through": message.seq}, say=("assistant_message", said))


def conversation_workflow_register(
    *, name: str, config: ConversationConfig | None = None, version: str = "1", description: str = ""
) -> Workflow:
    """Register a conversation workflow with its own context configuration."""
    CONVERSATION_CONFIGS[name] = config or ConversationConfig()
    flow = workflow(
        name,
        version=version,
        validate_input=_validate_input,
        description=description
        or "Answers user messages in order, with a token-budgeted, compacted context.",
    )
    flow.step(respond)
    return flow.register()


conversation = conversation_workflow_register(name="conversation")
