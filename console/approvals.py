"""How an approval reads to the person deciding it: the title, facts and buttons its workflow declared
(runs/authoring/display.py), or, for a workflow that declared none, its request shown plainly,
field by field, with nothing assumed (no order, no amount)."""

from __future__ import annotations

from dataclasses import dataclass

from console.display import clip, money_major, plain_value
from runs.authoring import authored
from runs.authoring.display import AMOUNT, ApprovalDisplay
from runs.kernel.models import Approval


@dataclass(frozen=True)
class ApprovalReading:
    title: str
    facts: list[tuple[str, str]]  # (label, value) in the order the workflow declared
    amount: str  # "" when the workflow declared none
    approve_label: str
    reject_label: str
    declared: bool


_text = plain_value


class _Fields(dict[str, str]):
    """The request's fields for a title; a field the request lacks reads "?", never an error."""

    def __missing__(self, key: str) -> str:
        return "?"


def approval_display_of(approval: Approval) -> ApprovalDisplay | None:
    run = approval.run
    definition = authored(run.workflow_name, run.workflow_version)
    return definition.approval_display_for(approval.step_id) if definition is not None else None


def approval_reading(approval: Approval) -> ApprovalReading:
    request = approval.request if isinstance(approval.request, dict) else {"request": approval.request}
    shown = approval_display_of(approval)
    if shown is None:
        run = approval.run
        return ApprovalReading(
            title=f"Approval asked by {run.workflow_name} at step {approval.step_id}",
            facts=[(str(key), _text(value)) for key, value in list(request.items())[:30]],
            amount="",
            approve_label="Approve",
            reject_label="Reject",
            declared=False,
        )
    amount = money_major(request.get(shown.amount[0]), request.get(shown.amount[1])) if shown.amount else ""
    fields = _Fields({str(k): _text(v) for k, v in request.items()})
    if shown.amount:
        fields[AMOUNT] = amount
    try:
        title = shown.title.format_map(fields)
    except (ValueError, IndexError, AttributeError):  # a title with positional or dotted fields
        title = shown.title
    return ApprovalReading(
        title=clip(title, 300),
        facts=[(label, fields[key]) for key, label in shown.fields],
        amount=amount,
        approve_label=shown.approve_label,
        reject_label=shown.reject_label,
        declared=True,
    )
