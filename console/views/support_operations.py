"""Support: an operation whose outcome nobody knows. What the lookups said (the worker's and the
console's, a lookup that failed told apart from one that proved nothing), the external system's own
records for it (shown and linked), and the reconciliation, whose typed reference is checked against
those records or, where nothing can check it, typed twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.display import operation_row
from console.htmx import HtmxHttpRequest, htmx_target
from console.roles import SUPPORT, role_required
from console.selectors import operation_last_lookup
from console.views.support_common import NoteForm, run_context, support_act, support_render, tenants_of
from core.errors import ApplicationError
from runs.engine.operations import RECONCILE_OUTCOMES, operation_reconcile
from runs.engine.registry import ToolLookup, registry
from runs.engine.selectors import RECONCILIATION_REQUIRED, operation_get_for_tenants
from runs.kernel.models import TERMINAL_RUN_STATUSES, OperationStatus, ToolOperation

OUTCOME_LABELS = {
    "applied": "applied: it happened (give the external reference you found)",
    "not_applied": "not applied: it never happened (allow one retry)",
}
RECORDS_SHOWN = 20


@dataclass
class ProviderRecords:
    """The external system's records that may be the operation's, and where to see them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # each row's external reference
    url: str = ""
    error: str = ""  # why they could not be read
    available: bool = False  # the tool can show them at all


def provider_records(op: ToolOperation) -> ProviderRecords:
    contract = registry.tool(op.tool_name)
    read, link = getattr(contract, "records", None), getattr(contract, "record_url", None)
    found = ProviderRecords(url=link(op.operation_id) if link is not None else "", available=read is not None)
    if read is None:
        return found
    try:
        rows = [row for row in read(op.operation_id) if isinstance(row, dict)][:RECORDS_SHOWN]
    except Exception as exc:  # the provider is down: say so, settle nothing
        found.error = f"{type(exc).__name__}: {exc}"[:300]
        return found
    reference = getattr(contract, "external_ref", None)
    for row in rows:
        try:
            ref = str(reference(row)) if reference is not None else ""
        except (KeyError, TypeError, ValueError):
            ref = ""
        found.rows.append({"ref": ref, "fields": sorted((str(k), v) for k, v in row.items())})
        if ref:
            found.refs.append(ref)
    return found


class ReconcileForm(NoteForm):
    outcome = forms.ChoiceField(
        choices=[(o, OUTCOME_LABELS[o]) for o in RECONCILE_OUTCOMES], widget=forms.RadioSelect
    )
    external_ref = forms.CharField(max_length=200, required=False)
    external_ref_again = forms.CharField(max_length=200, required=False, label="The reference again")
    checked_by_hand = forms.BooleanField(
        required=False, label="I checked this reference in the external system myself"
    )
    resume = forms.BooleanField(required=False, initial=True, label="resume the run afterwards")
    field_order = ["outcome", "external_ref", "external_ref_again", "checked_by_hand", "note", "resume"]

    def __init__(self, *args: Any, known_refs: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The references the external system showed for this operation (None: nothing could check).
        self.known_refs = known_refs

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        ref = data.get("external_ref", "").strip()
        if data.get("outcome") != "applied":
            return data
        if not ref:
            self.add_error("external_ref", "an applied operation needs the external reference you found")
        elif self.known_refs is None:
            # Nothing here can check it: the person types it twice.
            if data.get("external_ref_again", "").strip() != ref:
                self.add_error(
                    "external_ref_again",
                    "nothing here can check this reference against the external system: type it again",
                )
        elif ref not in self.known_refs and not data.get("checked_by_hand"):
            shown = ", ".join(self.known_refs[:5]) or "none"
            self.add_error(
                "external_ref",
                f"{ref} is not among the provider's records for this operation ({shown}). Check it; if you "
                "found it in the external system yourself, tick the box below and send it again.",
            )
        return data


def _operation(request: HtmxHttpRequest, pk: int) -> ToolOperation:
    op = operation_get_for_tenants(tenant_ids=tenants_of(request), pk=pk)
    if op is None:
        raise Http404("no such operation")
    return op


def _known_refs(op: ToolOperation, records: ProviderRecords) -> list[str] | None:
    """What a typed reference is checked against: the records' references and the console's latest
    authoritative lookup's; None when neither could say anything."""
    lookup = operation_last_lookup(op=op)
    said = lookup.details if lookup is not None else {}
    refs = list(records.refs)
    if said.get("authoritative") and said.get("applied") and said.get("external_ref"):
        refs.append(str(said["external_ref"]))
    return refs if refs or (records.available and not records.error) else None


def _worker_lookup(op: ToolOperation) -> str:
    """What the worker's own lookup said when it stopped the run (its suspend detail), or the newest
    move of the operation that a lookup decided."""
    run = op.run
    if run.suspend_reason == RECONCILIATION_REQUIRED and "lookup" in (run.suspend_detail or ""):
        return run.suspend_detail
    for move in reversed(op.history or []):
        if isinstance(move, dict) and "lookup" in str(move.get("note", "")):
            return str(move.get("note", ""))
    return ""


def _operation_page(
    request: HtmxHttpRequest,
    pk: int,
    *,
    form: forms.Form | None = None,
    lookup_error: str = "",
    status: int = 200,
    fragment: bool = False,
) -> HttpResponse:
    """The reconcile page; `fragment`: only its lookup-and-reconcile card (the htmx answer to "Look up
    again", swapped in place; always 200 so htmx swaps it, the reason shown inside). The polled run
    part reads nothing of the external system."""
    op = _operation(request, pk)
    if htmx_target(request) == "run-status":
        return support_render(request, "console/support/operation.html", {"op": op, **run_context(op.run)})
    contract = registry.tool(op.tool_name)
    row = operation_row(op, operation_last_lookup(op=op))
    records = provider_records(op)
    if form is None:
        said = row["lookup"] or {}
        initial = (
            {"outcome": "applied", "external_ref": said.get("external_ref") or ""}
            if said.get("authoritative") and said.get("applied")
            else {"outcome": "not_applied"}
            if said.get("authoritative")
            else {}
        )
        form = ReconcileForm(initial=initial, known_refs=_known_refs(op, records))
    context = {
        "row": row,
        "op": op,
        "form": form,
        "records": records,
        "lookup_error": lookup_error,
        "open": op.status in (OperationStatus.STARTED, OperationStatus.UNKNOWN),
        "history": [
            {**h, "at": str(h.get("at", ""))[:19].replace("T", " ")}
            for h in op.history or []
            if isinstance(h, dict)
        ],
        "worker_lookup": _worker_lookup(op),
        "can_look_up": contract is not None and contract.lookup is not None,
        "just_looked_up": fragment and not lookup_error,
        **run_context(op.run),
    }
    if fragment:
        return render(request, "console/support/operation.html#lookup-card", context)
    return support_render(request, "console/support/operation.html", context, status)


@role_required(SUPPORT)
@require_safe
def support_operation(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _operation_page(request, pk)


@role_required(SUPPORT)
@require_POST
def support_operation_lookup(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Ask the external system again, by idempotency key, through the tool's own lookup (the one the
    workflow and resume verification use), and record what it said. It settles nothing by itself."""
    op = _operation(request, pk)
    inline = bool(request.htmx)
    contract = registry.tool(op.tool_name)
    if contract is None or contract.lookup is None:
        why = f"{op.tool_name} has no lookup here; check the external system by hand and reconcile"
        return _operation_page(request, pk, lookup_error=why, status=409, fragment=inline)
    try:
        found = contract.lookup(op.operation_id) or ToolLookup(authoritative=False, applied=None)
    except ApplicationError as exc:
        return _operation_page(request, pk, lookup_error=exc.message, status=exc.http_status, fragment=inline)
    # Not the answer's body: the audit log is append-only and an external system's answer can hold
    # the customer's data (a refund lookup echoed its idempotency key, which embedded the subject's
    # id, and the subject's erasure then failed for ever).
    said = {
        "tool": op.tool_name,
        "authoritative": found.authoritative,
        "applied": found.applied,
        "external_ref": found.external_ref,
        "unavailable": bool(getattr(found, "unavailable", "")),
    }
    audit_record(
        request=request,
        action="lookup",
        tenant=op.tenant,
        # By its row's number: the operation id is the external system's key and can embed the
        # subject's id, and an audit entry's target can never be erased.
        target_type="operation",
        target_id=op.pk,
        details={**said, "operation_pk": op.pk, "run_id": str(op.run_id)},
    )
    if inline:  # the answer in place of the card (the reconcile form prefilled from it)
        return _operation_page(request, pk, fragment=True)
    if found.authoritative and found.applied:
        messages.info(
            request,
            f"The lookup says it was applied (reference {found.external_ref}). "
            "Mark it applied with that reference.",
        )
    elif found.authoritative:
        messages.info(request, "The lookup says it was not applied. Confirm not applied to allow one retry.")
    elif said["unavailable"]:
        messages.warning(request, "The lookup failed: the external system did not answer. Try again later.")
    else:
        messages.warning(
            request,
            "The lookup is not authoritative: it proves nothing. Check the provider's records before you reconcile.",
        )
    return redirect("console:support_operation", pk=op.pk)


@role_required(SUPPORT)
@require_POST
def support_operation_reconcile(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    op = _operation(request, pk)
    records = provider_records(op)
    form = ReconcileForm(request.POST, known_refs=_known_refs(op, records))
    if not form.is_valid():
        return _operation_page(request, pk, form=form, status=422)
    data = form.cleaned_data
    ref = data["external_ref"].strip() or None
    return support_act(
        request,
        form,
        perform=lambda d: operation_reconcile(
            tenant_id=op.tenant_id,
            operation_id=op.operation_id,
            actor=actor_of(request),
            note=d["note"],
            outcome=d["outcome"],
            external_ref=ref,
            resume=d["resume"],
        ),
        page=lambda f, status: _operation_page(request, pk, form=f, status=status),
        action="reconcile",
        tenant=op.tenant,
        target_type="operation",
        target_id=op.pk,  # by number, as the lookup's
        details={
            "run_id": str(op.run_id),
            "operation_pk": op.pk,
            "outcome": data["outcome"],
            "external_ref": ref,
            "resume": data["resume"],
            # How the reference was checked: among the provider's records, typed twice, or by hand.
            "reference_check": (
                ""
                if ref is None
                else "typed twice"
                if form.known_refs is None
                else "among the provider's records"
                if ref in form.known_refs
                else "checked by hand"
            ),
        },
        done="Reconciled."
        + (
            f" The run is {op.run.status}: the settlement is recorded on it."
            if op.run.status in TERMINAL_RUN_STATUSES
            else " The run continues once a worker has verified it."
            if data["resume"]
            else " The run stays suspended until someone resumes it."
        ),
        next_url=reverse("console:support_operation", args=[op.pk]),
    )
