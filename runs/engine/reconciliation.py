"""A person's reconciliation of an operation, read and corrected: the external system's records it is
checked against, every reconciliation of an operation (from its run's log, never overwritten), and
the correction of a wrong one, which takes the run back to the step that made the call.

A correction replaces the operation's recorded outcome (its history keeps the one it replaces) and, in
the same transaction, moves the suspended run back to that step with the state it began from (a
`reconciliation_corrected` event). The step runs again and reads the corrected record: an operation
settled before is answered from its record, never sent again; one corrected to "not applied" is sent
once, as after a person's "not applied".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from core.digests import canonical_json, json_digest
from core.errors import Conflict, InvalidInput, NotFound
from core.security import visible_text
from core.tenancy import tenant_of_call
from runs.engine import operation_statements as statements
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.operations import RECONCILE_OUTCOMES
from runs.engine.registry import registry
from runs.engine.workspace_models import WorkspaceSnapshot
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import SubjectErased
from runs.kernel.models import SUBJECT_ERASED, AgentEvent, AgentRun, RunStatus, ToolOperation
from runs.kernel.state import state_encode

RECONCILED = "operation_reconciled"
CORRECTED = "reconciliation_corrected"
# The suspend reason of a run whose reconciliation was corrected, until it is resumed.
CORRECTED_REASON = "reconciliation_corrected"
# A step's own outcomes: the events that say the step ran (and read the operation's record).
_STEP_OUTCOMES = ("step_completed", "run_suspended", "run_completed", "run_failed", "step_error")
RECORDS_SHOWN = 20


class OperationNotReconciled(Conflict):
    """The operation's outcome is not a person's reconciliation (the tool answered, or it is in doubt)."""

    code = "operation_not_reconciled"


class RunNotSuspended(Conflict):
    code = "run_not_suspended"


class StaleRevision(Conflict):
    """The run changed since the person read it (a worker, another person, the same click twice)."""

    code = "stale_revision"


class CorrectionRefused(Conflict):
    """Going back to the step would not give the run the state it began that step from."""

    code = "correction_refused"


class NothingToCorrect(InvalidInput):
    code = "nothing_to_correct"


class UnknownReference(InvalidInput):
    """The reference is not among the external system's records for the operation."""

    code = "unknown_reference"


class ReferenceUnchecked(InvalidInput):
    """Nothing here can check the reference, and the person did not say they checked it."""

    code = "reference_unchecked"


# --- the external system's records ----------------------------------------------------------------


@dataclass
class ProviderRecords:
    """The external system's records that may be the operation's, and where to see them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # each row's external reference
    url: str = ""
    error: str = ""  # why they could not be read
    available: bool = False  # the tool can show them at all

    @property
    def readable(self) -> bool:
        """The records were read: a reference not among them is not the provider's."""
        return self.available and not self.error


def provider_records(op: ToolOperation) -> ProviderRecords:
    """What the tool's `records` show for the operation (each row's reference read as the tool reads a
    successful answer's), and its `record_url`. It settles nothing."""
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


# --- the reconciliations of an operation ------------------------------------------------------------


@dataclass(frozen=True)
class Reconciliation:
    """One person's reconciliation of an operation, or a correction of one, as its run's log has it."""

    seq: int
    kind: str  # operation_reconciled or reconciliation_corrected
    at: datetime
    actor: str
    outcome: str
    external_ref: str | None
    note: str
    reference_check: str = ""

    @property
    def corrected(self) -> bool:
        return self.kind == CORRECTED


def operation_reconciliations(*, op: ToolOperation) -> list[Reconciliation]:
    """Every reconciliation and correction of the operation, oldest first, from the log of the run that
    prepared it: each kept as it was written."""
    events = (
        AgentEvent.objects.filter(
            run_id=op.run_id,
            tenant_id=op.tenant_id,
            event_type__in=(RECONCILED, CORRECTED),
            payload__operation_id=op.operation_id,
        )
        .order_by("seq")
        .values("seq", "event_type", "created_at", "actor", "payload")
    )
    return [
        Reconciliation(
            seq=e["seq"],
            kind=e["event_type"],
            at=e["created_at"],
            actor=e["actor"],
            outcome=str((e["payload"] or {}).get("outcome", "")),
            external_ref=(e["payload"] or {}).get("external_ref"),
            note=str((e["payload"] or {}).get("note", "")),
            reference_check=str((e["payload"] or {}).get("reference_check", "")),
        )
        for e in events
    ]


def operation_settled_by_person(*, op: ToolOperation) -> Reconciliation | None:
    """The person's reconciliation (or correction) that the operation's outcome still is; None when
    its last move was not theirs (the tool answered, a worker sent it again, or nobody reconciled it)."""
    done = operation_reconciliations(op=op)
    history = [h for h in op.history or [] if isinstance(h, dict)]
    if not done or not history:
        return None
    last, move = done[-1], history[-1]
    status = "succeeded" if last.outcome == "applied" else "prepared"
    if (move.get("status"), move.get("by"), move.get("note")) != (status, last.actor, last.note):
        return None
    if op.status != status or (status == "succeeded" and op.external_ref != last.external_ref):
        return None
    return last


def run_operations_reconciled_by_person(*, run: AgentRun) -> list[ToolOperation]:
    """The run's operations whose outcome is a person's reconciliation (each one can be corrected)."""
    ops = ToolOperation.objects.filter(run_id=run.run_id, tenant_id=run.tenant_id).order_by("created_at")
    return [op for op in ops if operation_settled_by_person(op=op) is not None]


# --- the correction -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Correction:
    op: ToolOperation
    seq: int  # the run's reconciliation_corrected event
    step: str  # the step the run goes back to
    replaced: Reconciliation
    reference_check: str


def _reference_check(op: ToolOperation, ref: str, checked_by_hand: bool) -> str:
    """How the reference was checked: among the provider's records, or by the person by hand."""
    records = provider_records(op)
    if ref in records.refs:
        return "among the provider's records"
    if checked_by_hand:
        return "checked by hand"
    if records.readable:
        shown = ", ".join(records.refs[:5]) or "none"
        raise UnknownReference(
            f"{ref} is not among the provider's records for {op.operation_id} ({shown}); pick one of them, "
            "or say you checked it in the external system yourself",
            details={"provider_refs": records.refs[:RECORDS_SHOWN]},
        )
    why = records.error or f"{op.tool_name} shows no records here"
    raise ReferenceUnchecked(
        f"nothing here can check {ref} ({why}): say you checked it in the external system yourself",
        details={"provider_error": records.error},
    )


def _step_began(run: AgentRun, op: ToolOperation, since: int) -> tuple[int | None, dict[str, Any]]:
    """The state the operation's step began from, after the person's reconciliation at `since`: the
    state just before that step's first outcome since (None, the run's state: it has not run since)."""
    ran = (
        AgentEvent.objects.filter(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            seq__gt=since,
            step_id=op.step_id,
            event_type__in=_STEP_OUTCOMES,
        )
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if ran is None:
        if run.next_step != op.step_id:
            raise CorrectionRefused(
                f"run {run.run_id} is at step {run.next_step!r}, not at {op.step_id!r} which made the call, "
                "and it has not run that step since the reconciliation: fork or rewind it instead",
                details={"next_step": run.next_step, "step": op.step_id},
            )
        return None, dict(run.state)
    migrated = AgentEvent.objects.filter(
        run_id=run.run_id, tenant_id=run.tenant_id, seq__gte=ran, event_type="state_migrated"
    ).exists()
    before = _state_at(run, ran - 1)
    if migrated or before is None:
        why = "its state was migrated since" if migrated else "the state it began from cannot be rebuilt"
        raise CorrectionRefused(
            f"run {run.run_id} cannot go back to step {op.step_id!r}: {why}; fork or rewind it instead",
            details={"step": op.step_id, "seq": ran - 1},
        )
    if _files_changed_since(run, ran - 1):
        raise CorrectionRefused(
            f"run {run.run_id}'s files changed after step {op.step_id!r} began: going back in place would "
            "keep them; rewind it to that step instead (a rewind restores its files)",
            details={"step": op.step_id, "seq": ran - 1},
        )
    return ran, before


def _state_at(run: AgentRun, seq: int) -> dict[str, Any] | None:
    """The run's state right after event `seq`, if it still matches the digest that event recorded."""
    events = AgentEvent.objects.filter(run_id=run.run_id, tenant_id=run.tenant_id)
    digest = events.filter(seq=seq).values_list("state_digest", flat=True).first()
    state = (
        events.filter(seq__lte=seq, state__isnull=False)
        .order_by("-seq")
        .values_list("state", flat=True)
        .first()
    )
    if not isinstance(state, dict) or digest is None or json_digest(state) != digest:
        return None
    return state


def _files_changed_since(run: AgentRun, seq: int) -> bool:
    def files_at(at_most: int | None) -> Any:
        snapshots = WorkspaceSnapshot.objects.filter(run_id=run.run_id, tenant_id=run.tenant_id)
        if at_most is not None:
            snapshots = snapshots.filter(seq__lte=at_most)
        return snapshots.order_by("-seq").values_list("manifest", flat=True).first()

    return bool(files_at(seq) != files_at(None))


def _stale(run: AgentRun, op: ToolOperation, expected: int) -> StaleRevision:
    since = [r for r in operation_reconciliations(op=op) if r.seq > expected and r.corrected]
    said = (
        f"it was corrected meanwhile by {since[-1].actor} ({since[-1].outcome}"
        + (f", {since[-1].external_ref}" if since[-1].external_ref else "")
        + "): nothing was done twice"
        if since
        else "a worker or a person acted on it meanwhile: nothing was done"
    )
    return StaleRevision(
        f"run {run.run_id} is at revision {run.state_revision}, not {expected} as read; {said}. "
        "Look at it again before you correct it.",
        details={"revision": run.state_revision, "expected_revision": expected},
    )


@tenant_of_call
def operation_reconciliation_correct(
    *,
    tenant_id: UUID,
    operation_id: str,
    actor: str,
    note: str,
    outcome: str,
    external_ref: str | None = None,
    checked_by_hand: bool = False,
    expected_revision: int | None = None,
    resume: bool = True,
) -> Correction:
    """Correct a person's reconciliation of an operation whose run is suspended (typically
    `verification_failed`, after a wrong reference): `applied` with the right reference (among the
    provider's records, or `checked_by_hand`) or `not_applied` (the run sends it once more). The run
    goes back to the step that made the call and (with `resume`) is asked to go on. `expected_revision`:
    the run's revision the person read (StaleRevision if it moved)."""
    if not visible_text(note):
        raise InvalidInput(
            "a correction needs a note saying what was wrong and what was checked", code="note_required"
        )
    if outcome not in RECONCILE_OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(RECONCILE_OUTCOMES)}", code="invalid_outcome")
    ref = (external_ref or "").strip() or None
    if outcome == "applied" and ref is None:
        raise InvalidInput("an applied operation needs its external reference", code="external_ref_required")
    if outcome == "not_applied":
        ref = None
    op = ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()
    if op is None:
        raise NotFound(f"no operation {operation_id}", code="operation_not_found")
    run = AgentRun.objects.get(run_id=op.run_id, tenant_id=tenant_id)
    if expected_revision is not None and run.state_revision != expected_revision:
        raise _stale(run, op, expected_revision)
    if run.status != RunStatus.SUSPENDED:
        raise RunNotSuspended(
            f"run {run.run_id} is {run.status}: a reconciliation is corrected while its run is suspended "
            "(a running run's worker reads the record; a finished run never goes back)",
            details={"status": run.status},
        )
    if run.suspend_reason == SUBJECT_ERASED:
        raise SubjectErased(f"run {run.run_id}'s subject was erased: it never continues")
    if run.resume_requested_at is not None:
        raise RunNotSuspended(
            f"run {run.run_id} was asked to resume by {run.resume_requested_by}: wait until a worker has "
            "verified it, then correct it if it stops again",
            code="resume_pending",
            details={"status": run.status, "resume_requested_by": run.resume_requested_by},
        )
    replaced = operation_settled_by_person(op=op)
    if replaced is None:
        raise OperationNotReconciled(
            f"operation {operation_id} is {op.status} and its outcome is not a person's reconciliation "
            "(the tool's own answer, or still in doubt): only a person's reconciliation is corrected"
            + ("; reconcile it instead" if op.status in ("started", "unknown") else ""),
            details={"status": op.status},
        )
    if (outcome, ref) == (replaced.outcome, replaced.external_ref if outcome == "applied" else None):
        raise NothingToCorrect(
            f"operation {operation_id} is already reconciled as {outcome}"
            + (f" with {ref}" if ref else "")
            + ": nothing to correct",
        )
    check = "" if ref is None else _reference_check(op, ref, checked_by_hand)
    ran, state = _step_began(run, op, replaced.seq)
    payload = {
        "operation_id": operation_id,
        "outcome": outcome,
        "external_ref": ref,
        "note": note,
        "reference_check": check,
        "corrects": {
            "seq": replaced.seq,
            "actor": replaced.actor,
            "at": replaced.at.isoformat(),
            "outcome": replaced.outcome,
            "external_ref": replaced.external_ref,
        },
        "step": op.step_id,
        "undone_from_seq": ran,
        "resume": resume,
    }
    detail = (
        f"{actor} corrected the reconciliation of {operation_id} to {outcome}"
        + (f" ({ref})" if ref else "")
        + f"; the run goes back to step {op.step_id}"
    )
    with transaction.atomic():
        written = statements.operation_correct(
            tenant_id=tenant_id,
            operation_id=operation_id,
            from_status=op.status,
            moves=len(op.history or []),
            to_status="succeeded" if outcome == "applied" else "prepared",
            actor=actor,
            note=note,
            external_ref=ref,
            result_json=canonical_json({"reconciled_by": actor}) if outcome == "applied" else None,
        )
        seq = (
            None
            if written is None
            else apply(
                m.ReconciliationCorrected(
                    run_id=run.run_id,
                    tenant_id=tenant_id,
                    expected_revision=run.state_revision,
                    state=state_encode(state),
                    next_step=op.step_id,
                    detail=detail,
                    payload=payload,
                    actor=actor,
                    request_resume=resume,
                )
            )
        )
        if seq is None:  # the exception rolls the operation's change back with it
            raise _stale(run, op, run.state_revision)
        if resume:
            run_enqueue_on_commit(run_id=run.run_id)
    op.refresh_from_db()
    return Correction(op=op, seq=seq, step=op.step_id, replaced=replaced, reference_check=check)
