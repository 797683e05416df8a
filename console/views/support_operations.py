"""Support: an operation whose outcome nobody knows. What the lookups said (the worker's and the
console's, a lookup that failed told apart from one that proved nothing), the external system's own
records for it (shown and linked), and the reconciliation, whose typed reference is checked against
those records or, where nothing can check it, typed twice."""

from __future__ import annotations

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
from runs.engine.reconciliation import (
    ProviderRecords,
    operation_reconciliation_correct,
    operation_reconciliations,
    operation_settled_by_person,
    provider_records,
)
from runs.engine.registry import ToolLookup, registry
from runs.engine.selectors import RECONCILIATION_REQUIRED, operation_get_for_tenants
from runs.kernel.models import (
    SUBJECT_ERASED,
    TERMINAL_RUN_STATUSES,
    OperationStatus,
    RunStatus,
    ToolOperation,
)

OUTCOME_LABELS = {
    "applied": "applied: it happened (give the external reference you found)",
    "not_applied": "not applied: it never happened (allow one retry)",
}


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


CORRECT_LABELS = {
    "applied": "applied, with the reference picked or typed below",
    "not_applied": "not applied: it never happened (the run sends it once)",
}


class CorrectForm(ReconcileForm):
    """Correct a person's reconciliation: the right reference picked among the provider's records (or
    typed, checked as a reconciliation's is), or "not applied"; the run's revision the page showed
    makes a second click or a stale page a refusal, not a second correction."""

    pick = forms.ChoiceField(required=False, widget=forms.RadioSelect, label="The provider's records")
    expected_revision = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    field_order = [
        "outcome",
        "pick",
        "external_ref",
        "external_ref_again",
        "checked_by_hand",
        "note",
        "resume",
    ]

    def __init__(self, *args: Any, records: list[str] | None = None, **kwargs: Any) -> None:
        # Its own field names: the reconcile form may be on the same page.
        super().__init__(*args, prefix="correct", **kwargs)
        outcome, pick = self.fields["outcome"], self.fields["pick"]
        assert isinstance(outcome, forms.ChoiceField) and isinstance(pick, forms.ChoiceField)
        outcome.choices = [(o, CORRECT_LABELS[o]) for o in RECONCILE_OUTCOMES]
        pick.choices = [("", "another reference, typed below")] + [(r, r) for r in records or []]

    def clean(self) -> dict[str, Any]:
        data = self.cleaned_data
        picked, typed = data.get("pick") or "", (data.get("external_ref") or "").strip()
        if picked and data.get("outcome") == "applied":
            if typed and typed != picked:
                self.add_error("external_ref", "pick a record or type a reference, not both")
            data["external_ref"] = picked
        return super().clean()

    def reference_check(self) -> str:
        """How the reference was checked, for the audit log."""
        ref = (self.cleaned_data.get("external_ref") or "").strip()
        if self.cleaned_data.get("outcome") != "applied" or not ref:
            return ""
        if self.cleaned_data.get("pick"):
            return "picked among the provider's records"
        if self.known_refs is None:
            return "typed twice"
        return "among the provider's records" if ref in self.known_refs else "checked by hand"


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
    correct_form: CorrectForm | None = None,
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
    context.update(_correction_context(op, records, correct_form))
    return support_render(request, "console/support/operation.html", context, status)


def _correction_context(
    op: ToolOperation, records: ProviderRecords, form: CorrectForm | None
) -> dict[str, Any]:
    """Every reconciliation of the operation (kept, the newest in force), and the correction form
    while a person's reconciliation is its outcome and its run waits."""
    settled = operation_settled_by_person(op=op)
    run = op.run
    correctable = (
        settled is not None
        and run.status == RunStatus.SUSPENDED
        and run.suspend_reason != SUBJECT_ERASED
        and run.resume_requested_at is None
    )
    if form is None and correctable:
        form = CorrectForm(
            initial={"expected_revision": run.state_revision, "outcome": "applied"},
            known_refs=_known_refs(op, records),
            records=records.refs,
        )
    return {
        "reconciliations": operation_reconciliations(op=op),
        "settled_by_person": settled,
        "correctable": correctable,
        "correct_form": form,
    }


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


@role_required(SUPPORT)
@require_POST
def support_operation_correct(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Correct a person's reconciliation: the run goes back to the step that made the call and reads
    the corrected record (never sending it again); the reconciliation it replaces stays on record."""
    op = _operation(request, pk)
    records = provider_records(op)
    form = CorrectForm(request.POST, known_refs=_known_refs(op, records), records=records.refs)
    if not form.is_valid():
        return _operation_page(request, pk, correct_form=form, status=422)
    data = form.cleaned_data
    ref = (data["external_ref"] or "").strip() or None if data["outcome"] == "applied" else None
    settled = operation_settled_by_person(op=op)
    return support_act(
        request,
        form,
        perform=lambda d: operation_reconciliation_correct(
            tenant_id=op.tenant_id,
            operation_id=op.operation_id,
            actor=actor_of(request),
            note=d["note"],
            outcome=d["outcome"],
            external_ref=ref,
            # The form checked it: among the records, typed twice, or ticked.
            checked_by_hand=True,
            expected_revision=d["expected_revision"],
            resume=d["resume"],
        ),
        page=lambda f, status: _operation_page(request, pk, correct_form=f, status=status),  # type: ignore[arg-type]
        action="correct_reconciliation",
        tenant=op.tenant,
        target_type="operation",
        target_id=op.pk,  # by number, as the reconcile's
        details={
            "run_id": str(op.run_id),
            "operation_pk": op.pk,
            "outcome": data["outcome"],
            "external_ref": ref,
            "resume": data["resume"],
            "reference_check": form.reference_check(),
            "corrects": None
            if settled is None
            else {"outcome": settled.outcome, "external_ref": settled.external_ref, "by": settled.actor},
        },
        done=_corrected_message(op.step_id, data["outcome"], data["resume"]),
        next_url=reverse("console:support_operation", args=[op.pk]),
    )


def _corrected_message(step: str, outcome: str, resume: bool) -> str:
    then = (
        "continues once a worker has verified it"
        + (
            ": it reads the corrected record, nothing is sent again."
            if outcome == "applied"
            else ": the operation was never applied, so the step sends it, once."
        )
        if resume
        else "stays suspended until someone resumes it."
    )
    return (
        f"Corrected. The earlier reconciliation stays on record; the run goes back to step {step} and {then}"
    )
