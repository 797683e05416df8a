"""The public authoring API: declare a workflow and its steps as plain functions, with side effects
(`ctx.operation`), human approvals (`ctx.approval`; how they read to the person deciding:
`wf.approval_display`), durable timers (`ctx.sleep`), signals (`ctx.wait_signal`) and child runs
(`ctx.start_child`, `ctx.wait_child`) in one call each.

A step is a deterministic function of (context, state) that returns where the run goes next:
`ctx.next(other_step, state)`, `ctx.suspend(...)`, `ctx.complete(...)` or `ctx.fail(...)`. The
state is a plain JSON dict, or a dataclass / pydantic model the definition names; it is what
survives a crash, so nothing else that matters may live outside it. Every step is still one
committed, fenced step of the engine (runs/engine/steps.py): this module only builds the
`Workflow` the registry holds and wraps each step function.

    wf = workflow("shop.order", version="1")

    @wf.step
    def charge(ctx: Context, state: State) -> StepResult:
        paid = ctx.operation(f"charge:{state['order']}", tool=PAYMENTS, request={...}, call=send)
        return ctx.complete(state, {"charge": paid.external_ref})

    wf.register()
"""

from __future__ import annotations

from runs.engine.authoring.context import (
    SIGNAL,
    TIMER,
    AnyStep,
    ApprovalDecision,
    Context,
    Signal,
)
from runs.engine.authoring.definition import Definition, StepFunction, workflow
from runs.engine.authoring.display import ApprovalDisplay
from runs.engine.authoring.tools import (
    OperationCall,
    OperationOutcome,
    OperationOutcomeUnknown,
    OperationRejected,
    Tool,
    tool,
)
from runs.engine.children import CHILD_RUN, ChildOutcome, ChildRun
from runs.engine.registry import State, StepResult, ToolLookup

__all__ = [
    "CHILD_RUN",
    "SIGNAL",
    "TIMER",
    "AnyStep",
    "ApprovalDisplay",
    "ApprovalDecision",
    "ChildOutcome",
    "ChildRun",
    "Context",
    "Definition",
    "OperationCall",
    "OperationOutcome",
    "OperationOutcomeUnknown",
    "OperationRejected",
    "Signal",
    "State",
    "StepFunction",
    "StepResult",
    "Tool",
    "ToolLookup",
    "tool",
    "workflow",
]
