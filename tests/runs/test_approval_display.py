"""A workflow declares how its approvals read (runs/authoring/display.py): checked when it is
declared, found per step, and shown by the support console as declared."""

from __future__ import annotations

import pytest

from runs.authoring import authored, workflow
from runs.kernel.errors import WorkflowDefinitionError


def test_a_display_is_checked_where_the_workflow_is_declared():
    wf = workflow("t.display.checked", version="1")
    with pytest.raises(WorkflowDefinitionError, match="needs a title"):
        wf.approval_display(title=" ")
    with pytest.raises(WorkflowDefinitionError, match="declares amount"):
        wf.approval_display(title="Pay {amount}")
    with pytest.raises(WorkflowDefinitionError, match="not a format string"):
        wf.approval_display(title="Pay {order")
    with pytest.raises(WorkflowDefinitionError, match="minor units key, currency key"):
        wf.approval_display(title="Pay", amount=tuple(["amount_minor"]))
    with pytest.raises(WorkflowDefinitionError, match="request key, label"):
        wf.approval_display(title="Pay", fields=[("order_id", "")])


def test_a_display_of_one_step_wins_over_the_workflows():
    wf = workflow("t.display.steps", version="1")

    @wf.step
    def ask(ctx, state):  # pragma: no cover - never run
        return ctx.complete(state)

    @wf.step
    def ask_again(ctx, state):  # pragma: no cover - never run
        return ctx.complete(state)

    general = wf.approval_display(title="Anything")
    special = wf.approval_display(title="Refund {amount}", amount=("minor", "currency"), step=ask_again)
    wf.register()
    definition = authored("t.display.steps", "1")
    assert definition is not None
    assert definition.approval_display_for("ask") is general
    assert definition.approval_display_for("ask_again") is special


def test_the_demo_workflows_with_approvals_declare_how_they_read():
    for name in ("refund", "support_agent", "demo.credit"):
        definition = authored(name, "1")
        assert definition is not None and definition.approval_display_for("approve") is not None, name
