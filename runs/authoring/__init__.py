"""Keeper's authoring API: everything a workflow module imports, from this one package.

Declare a workflow and its steps as plain functions, with side effects (`ctx.operation`), human
approvals (`ctx.approval`; how they read to the person deciding: `wf.approval_display`), durable
timers (`ctx.sleep`), signals (`ctx.wait_signal`) and child runs (`ctx.start_child`,
`ctx.wait_child`) in one call each:

    from runs.authoring import Context, State, StepResult, tool, workflow

    wf = workflow("shop.order", version="1")

    @wf.step
    def charge(ctx: Context, state: State) -> StepResult:
        paid = ctx.operation(f"charge:{state['order']}", tool=PAYMENTS, request={...}, call=send)
        return ctx.complete(state, {"charge": paid.external_ref})

    wf.register()

A step is a deterministic function of (context, state) that returns where the run goes next:
`ctx.next(other_step, state)`, `ctx.suspend(...)`, `ctx.complete(...)` or `ctx.fail(...)`. The state
is a plain JSON dict, or a dataclass / pydantic model the definition names; it is what survives a
crash, so nothing else that matters may live outside it. A step runs again from its top after a
crash or a wait. Every step is one committed, fenced move of the run kernel (runs.kernel).

Testing: runs.authoring.testing is the test kit (the pytest fixture `keeper_env` from
config.pytest_plugin drives runs through the real engine with a clock the test moves and fake tools),
runs.authoring.replay the replay check of recorded histories (`manage.py replay_check`).

Names starting with an underscore (runs.authoring._context...) are internal and may change; Keeper's
own workflows (runs/workflows/) import only this package, and an import contract holds them to it.
The console reads what a workflow declared through `authored` and runs.authoring.display.
"""

from __future__ import annotations

from runs.authoring._context import SIGNAL, TIMER, AnyStep, ApprovalDecision, Context, Signal
from runs.authoring._definition import Definition, StepFunction, authored, workflow
from runs.authoring._tools import (
    OperationCall,
    OperationOutcome,
    OperationOutcomeUnknown,
    OperationRejected,
    Tool,
    tool,
)
from runs.authoring.display import ApprovalDisplay
from runs.conversations.context import DEFAULT_BUDGET, BuiltContext, ContextBudget, context_build
from runs.conversations.messages import AWAITING_INPUT, conversation_next_unanswered
from runs.engine.children import CHILD_RUN, ChildOutcome, ChildRun
from runs.engine.dispatch import task_enqueue
from runs.engine.operations import run_lineage
from runs.engine.registry import StepResult, ToolLookup, Workflow
from runs.engine.selectors import operation_find
from runs.engine.state_migrations import SchemaSet, StateSchemaError
from runs.kernel.models import AgentRun
from runs.kernel.outcomes import State

__all__ = [
    # declaring a workflow and its steps
    "workflow",
    "Definition",
    "Workflow",
    "StepFunction",
    "AnyStep",
    "Context",
    "State",
    "StepResult",
    "SchemaSet",
    "StateSchemaError",
    # side effects
    "tool",
    "Tool",
    "ToolLookup",
    "OperationCall",
    "OperationOutcome",
    "OperationOutcomeUnknown",
    "OperationRejected",
    "operation_find",
    "run_lineage",
    # waiting: people, timers, signals, child runs
    "ApprovalDecision",
    "ApprovalDisplay",
    "SIGNAL",
    "TIMER",
    "Signal",
    "CHILD_RUN",
    "ChildOutcome",
    "ChildRun",
    # conversations and the model's context
    "AWAITING_INPUT",
    "conversation_next_unanswered",
    "context_build",
    "ContextBudget",
    "BuiltContext",
    "DEFAULT_BUDGET",
    # the run itself, and background work
    "AgentRun",
    "task_enqueue",
    # what a registered workflow version declared (its signals, queries, approval displays)
    "authored",
]
