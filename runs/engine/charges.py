"""Charging model calls to a run's budgets: tokens from the reply's usage (or a tokenizer), cost from
the per-model price table (KEEPER_MODEL_PRICES), refused beforehand when the budget is already spent.

Inside a step the charge joins the step's spend (ctx.spend, so it lands in the step's event); outside
one (a compaction in the web process, extraction in a background task) it is a `model_usage` event of
its own, which resume counts when it recomputes the budgets from the log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol
from uuid import UUID

from django.conf import settings
from django.db import connection

from core.chat import ChatUsage, chat_meter_current, chat_metered
from core.errors import ApplicationError
from core.tenancy import run_tenant, tenant_bind
from runs.engine.registry import StepContext
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.budgets import (
    BudgetExhausted,
    Budgets,
    budgets_deadline_passed,
    budgets_describe,
    budgets_exhausted,
    budgets_recompute,
    budgets_spend,
)

# USD per 1,000 tokens, for the models of the token table (runs/conversations/compaction/tokens.py);
# KEEPER_MODEL_PRICES (JSON) adds models or overrides these. A model in neither costs nothing.
DEFAULT_MODEL_PRICES: dict[str, dict[str, float]] = {
    "gpt-4o": {"input_per_1k": 0.0025, "output_per_1k": 0.01},
    "gpt-4o-mini": {"input_per_1k": 0.00015, "output_per_1k": 0.0006},
    "gpt-4.1": {"input_per_1k": 0.002, "output_per_1k": 0.008},
    "gpt-4.1-mini": {"input_per_1k": 0.0004, "output_per_1k": 0.0016},
    "gpt-4-turbo": {"input_per_1k": 0.01, "output_per_1k": 0.03},
    "gpt-4": {"input_per_1k": 0.03, "output_per_1k": 0.06},
    "gpt-3.5-turbo": {"input_per_1k": 0.0005, "output_per_1k": 0.0015},
}
# The reply's priming (<|start|>assistant<|message|>) that a chat request adds to its messages.
REPLY_PRIMING = 3
MODEL_USAGE = "model_usage"


class DeadlinePassed(BudgetExhausted):
    code = "deadline_passed"


class _Counter(Protocol):
    def count(self, text: str) -> int: ...

    def count_message(self, role: str, content: str) -> int: ...


_tokenizers: list[Callable[[str | None], _Counter]] = []


def charges_tokenizer_register(factory: Callable[[str | None], _Counter]) -> None:
    """The tokenizer that counts a call whose reply has no usage (runs' AppConfig registers the
    conversations' token counter: the engine does not import conversations)."""
    _tokenizers[:] = [factory]


def model_prices() -> dict[str, dict[str, float]]:
    return {**DEFAULT_MODEL_PRICES, **(getattr(settings, "KEEPER_MODEL_PRICES", None) or {})}


def model_call_cost(*, model: str, prompt_tokens: int, completion_tokens: int) -> float:
    price = model_prices().get(model) or {}
    cost = prompt_tokens / 1000 * float(price.get("input_per_1k", 0)) + completion_tokens / 1000 * float(
        price.get("output_per_1k", 0)
    )
    return round(cost, 6)


def _counter(model: str) -> _Counter | None:
    if not _tokenizers:
        return None
    try:
        return _tokenizers[0](model)
    except ApplicationError:  # a model the token table does not know: count as the default model
        return _tokenizers[0](None)


def usage_tokens(usage: ChatUsage) -> tuple[int, int, bool]:
    """(prompt, completion, estimated): the provider's counts, else the tokenizer's (else ~4 chars a token)."""
    prompt, completion = usage.prompt_tokens, usage.completion_tokens
    if prompt is not None and completion is not None:
        return prompt, completion, False
    counter = _counter(usage.model)
    if prompt is None:
        prompt = (
            sum(counter.count_message(role, content) for role, content in usage.messages) + REPLY_PRIMING
            if counter is not None
            else math.ceil(sum(len(c) for _, c in usage.messages) / 4)
        )
    if completion is None:
        completion = counter.count(usage.reply) if counter is not None else math.ceil(len(usage.reply) / 4)
    return prompt, completion, True


def model_call_charge(
    *,
    usage: ChatUsage,
    ctx: StepContext | None = None,
    run_id: UUID | None = None,
    actor: str = "system:model",
) -> dict[str, Any]:
    """Charge one call: to the step (ctx) when made inside one, else as a `model_usage` event of run_id."""
    prompt, completion, estimated = usage_tokens(usage)
    cost = model_call_cost(model=usage.model, prompt_tokens=prompt, completion_tokens=completion)
    spent = {"tokens": prompt + completion, "cost_usd": cost}
    if ctx is not None:
        ctx.spend(tokens=prompt + completion, cost_usd=cost)
        return spent
    if run_id is None:
        raise ValueError("a charge needs the step context or the run id")
    payload = {
        "model": usage.model,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "estimated": estimated,
        "spent": spent,
    }
    tenant_id = run_tenant(run_id)
    if tenant_id is None:
        return spent
    with tenant_bind(tenant_id):  # a run that completed is still charged for the extraction after it
        apply(m.UsageCharged(run_id, tenant_id, payload, actor))
    return spent


def _outside_spent(run_id: UUID, *, since_last_resume: bool) -> list[dict[str, float]]:
    """The `spent` of the run's model_usage events (only those after its last resume_verified: the
    state's budgets already hold the earlier ones, resume recomputed them)."""
    sql = "SELECT payload->'spent' FROM agent_events WHERE run_id = %s AND event_type = 'model_usage'"
    params: list[Any] = [run_id]
    if since_last_resume:
        sql += (
            " AND seq > COALESCE((SELECT max(seq) FROM agent_events WHERE run_id = %s"
            " AND event_type = 'resume_verified'), 0)"
        )
        params.append(run_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_decoded(r[0]) or {} for r in cursor.fetchall()]


def _decoded(value: Any) -> Any:
    # Django registers jsonb to load as text on its connections; decode here.
    return json.loads(value) if isinstance(value, str | bytes) else value


def _refuse_if_spent(budgets: Budgets | None) -> None:
    if not isinstance(budgets, dict):
        return
    passed = budgets_deadline_passed(budgets)
    if passed:
        raise DeadlinePassed(passed)
    spent = [k for k in budgets_exhausted(budgets) if k in ("tokens", "cost_usd")]
    if spent:
        raise BudgetExhausted(f"the model call was refused: {budgets_describe(budgets, spent)}")


class StepMeter:
    """Charges the calls of one step to its context; refuses one once the run's tokens or cost are
    spent (what the step spent so far and model_usage events since the state was last recomputed count)."""

    def __init__(self, ctx: StepContext, budgets: Budgets | None):
        self.ctx = ctx
        self.run_id = ctx.run_id
        self.budgets = budgets if isinstance(budgets, dict) else None

    def before(self, *, model: str) -> None:
        if self.budgets is None:
            return
        current = budgets_spend(self.budgets, {"tokens": self.ctx.tokens, "cost_usd": self.ctx.cost_usd})
        for spent in _outside_spent(self.run_id, since_last_resume=True):
            current = budgets_spend(current, spent)
        _refuse_if_spent(current)

    def after(self, *, usage: ChatUsage) -> None:
        model_call_charge(usage=usage, ctx=self.ctx)


class RunMeter:
    """Charges calls made outside a step to the run, each as a model_usage event; refuses one once the
    budgets recomputed from the whole log are spent."""

    def __init__(self, run_id: UUID, actor: str):
        self.run_id = run_id
        self.actor = actor

    def before(self, *, model: str) -> None:
        tenant_id = run_tenant(self.run_id)
        if tenant_id is None:
            return
        with tenant_bind(tenant_id), connection.cursor() as cursor:
            cursor.execute("SELECT state->'budgets' FROM agent_runs WHERE run_id = %s", [self.run_id])
            row = cursor.fetchone()
            cursor.execute(
                "SELECT payload->'spent' FROM agent_events WHERE run_id = %s AND payload ? 'spent'",
                [self.run_id],
            )
            spent = [_decoded(r[0]) for r in cursor.fetchall()]
        budgets = _decoded(row[0]) if row else None
        if isinstance(budgets, dict):
            _refuse_if_spent(budgets_recompute(budgets, spent))

    def after(self, *, usage: ChatUsage) -> None:
        model_call_charge(usage=usage, run_id=self.run_id, actor=self.actor)


@contextmanager
def step_charging(ctx: StepContext, budgets: Budgets | None) -> Iterator[None]:
    """Every model call of the step (through core.chat) is charged to it and refused when spent."""
    with chat_metered(StepMeter(ctx, budgets)):
        yield


@contextmanager
def model_calls_charged(*, run_id: UUID, actor: str = "system:model") -> Iterator[None]:
    """Calls in the block charge run_id: to the running step when the block is inside a step of that
    run, else as model_usage events."""
    current = chat_meter_current()
    if isinstance(current, StepMeter) and current.run_id == run_id:
        yield
        return
    with chat_metered(RunMeter(run_id, actor)):
        yield
