"""How a workflow's approvals read to the person who decides them (the support console).

A workflow declares it once, beside its steps:

    refund_flow.approval_display(
        title="Refund {amount} for order {order_id}",
        fields=[("order_id", "Order"), ("amount", "Amount")],
        amount=("amount_minor", "currency"),
        approve_label="Approve refund",
    )

`title` is formatted with the request's fields (and `{amount}`, the declared amount with its currency);
`fields` are the request's keys that matter, with their labels, in order; `step` limits the display
to the approvals one step asks for. Nothing here decides anything: an approval a workflow did not
declare is shown plainly, every field of its request as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.kernel.errors import WorkflowDefinitionError

AMOUNT = "amount"  # the title's and the fields' name for the declared amount


@dataclass(frozen=True)
class ApprovalDisplay:
    title: str
    fields: tuple[tuple[str, str], ...] = ()
    amount: tuple[str, str] | None = None  # (the key of the amount in minor units, the key of its currency)
    approve_label: str = "Approve"
    reject_label: str = "Reject"


def approval_display_make(
    *,
    title: str,
    fields: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
    amount: tuple[str, str] | None = None,
    approve_label: str = "Approve",
    reject_label: str = "Reject",
) -> ApprovalDisplay:
    """The display, checked when the workflow is declared (a typo fails at import, not on a page)."""
    if not isinstance(title, str) or not title.strip():
        raise WorkflowDefinitionError("an approval display needs a title")
    pairs = tuple((str(key), str(label)) for key, label in fields)
    if any(not key or not label for key, label in pairs):
        raise WorkflowDefinitionError("each approval display field is a (request key, label) pair")
    if amount is not None and (len(amount) != 2 or not all(isinstance(k, str) and k for k in amount)):
        raise WorkflowDefinitionError("an approval display's amount is (minor units key, currency key)")
    if AMOUNT in {key for key, _ in pairs} | _placeholders(title) and amount is None:
        raise WorkflowDefinitionError("an approval display that shows {amount} declares amount=(...)")
    return ApprovalDisplay(
        title=title, fields=pairs, amount=amount, approve_label=approve_label, reject_label=reject_label
    )


def _placeholders(title: str) -> set[str]:
    from string import Formatter

    try:
        return {name for _, name, _, _ in Formatter().parse(title) if name}
    except ValueError as exc:
        raise WorkflowDefinitionError(f"an approval display's title is not a format string: {exc}") from None
