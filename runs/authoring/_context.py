"""The step context of the authoring API: the moves (next, suspend, complete, fail, sleep) and the
one-call helpers for side effects (operation) and human approvals (approval)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from django.utils import timezone

from core.crash import crash_point
from core.digests import json_digest
from core.errors import InvalidInput
from runs.authoring._tools import (
    OperationCall,
    OperationOutcome,
    OperationOutcomeUnknown,
    OperationRejected,
    Tool,
    tool_in_force,
)
from runs.engine.approvals import approval_check, approval_grant_automatically
from runs.engine.children import (
    CHILD_RUN,
    ChildOutcome,
    ChildRun,
    child_outcome,
    child_start,
    child_wait_detail,
)
from runs.engine.operations import (
    OperationInFlight,
    OperationOfAnotherRun,
    OperationRequestChanged,
    operation_mark_failed,
    operation_mark_not_applied,
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
)
from runs.engine.registry import (
    Complete,
    Fail,
    Next,
    State,
    StepContext,
    StepResult,
    Suspend,
)
from runs.engine.signals import signal_wait_detail
from runs.engine.workspace import Workspace, workspace_before_side_effect, workspace_of
from runs.kernel.errors import IdempotencyConflict, UnknownWorkflow, WorkflowDefinitionError
from runs.kernel.models import AgentEvent, Approval, ApprovalStatus

AnyStep = Callable[["Context", Any], StepResult]


class Steps(Protocol):
    """What a context needs of its workflow's definition (Definition implements it)."""

    def dump(self, state: object) -> State: ...

    def name_of(self, step: AnyStep | str) -> str: ...

    def approving_step(self, step: str) -> str | None: ...

    @property
    def signal_names(self) -> frozenset[str]: ...


# The suspend reason of a run that sleeps (ctx.sleep) until its wake time.
TIMER = "timer"
# The suspend reason of a run that waits for a signal (ctx.wait_signal); the detail names it.
SIGNAL = "signal"
# The state key where the engine keeps what signals a run consumed and when each wait times out.
SIGNALS_KEY = "signals_seen"


@dataclass(frozen=True)
class Signal:
    """What ctx.wait_signal returns: the delivered signal's JSON payload and the seq of its
    `signal_received` event, or (`timed_out`) the wait's deadline passed first (payload None)."""

    name: str
    payload: Any = None
    seq: int | None = None
    timed_out: bool = False
    deadline: str | None = None


# --- control flow raised by the one-call helpers and turned into a step result by the wrapper ---


class _Suspension(Exception):
    """A helper decided the run waits (an approval, a reconciliation): the step's result is a
    suspension at this same step, with the state it was given plus `patch`."""

    def __init__(self, reason: str, detail: str, patch: State | None = None, wake_at: datetime | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.patch, self.wake_at = reason, detail, patch or {}, wake_at


class _Rewind(Exception):
    """An approval lapsed before its side effect was sent: go back to the step that asked for it."""

    def __init__(self, step: str, drop: tuple[str, ...]):
        super().__init__(f"rewind to {step}")
        self.step, self.drop = step, drop


# --- approvals ---


@dataclass(frozen=True)
class ApprovalDecision:
    """A decided approval for one exact request: approved (use it) or rejected (with the note)."""

    approval_id: UUID
    approved: bool
    request_digest: str
    decided_by: str | None
    note: str

    @property
    def state(self) -> State:
        """What the run's state keeps of it: resume verification of a step declared with
        `acts_on_approval=True` checks this approval is still approved, unexpired and for the digest."""
        return {
            "approval": _approval_ref(
                self.approval_id, "approved" if self.approved else "rejected", self.decided_by
            ),
            "request_digest": self.request_digest,
        }


def _approval_ref(approval_id: UUID, status: str, decided_by: str | None) -> dict[str, Any]:
    return {"approval_id": str(approval_id), "status": status, "decided_by": decided_by or None}


# --- the step context ---


class Context:
    """What a step may use: the run's identity, its budgets, the moves, and the one-call helpers."""

    def __init__(self, base: StepContext, definition: Steps, state: State):
        self._base = base
        self._definition = definition
        self._state = state
        # What the engine keeps in the state for the helpers (signals consumed, waits' deadlines);
        # the step wrapper adds it to whatever state the step commits.
        self.engine_patch: State = {}

    @property
    def run_id(self) -> UUID:
        return self._base.run_id

    @property
    def tenant_id(self) -> UUID:
        return self._base.tenant_id

    @property
    def step(self) -> str:
        return self._base.step

    @property
    def attempt(self) -> int:
        return self._base.attempt

    @property
    def revision(self) -> int:
        return self._base.revision

    @property
    def actor(self) -> str:
        """Who acts: the worker holding the run's lease."""
        return self._base.lease.grant.owner

    @property
    def workspace(self) -> Workspace:
        """The run's files (read, write, delete, list): restored from its last snapshot, kept by
        the snapshot policy of runs/engine/workspace.py; a write counts once this step commits."""
        return workspace_of(run_id=self.run_id, tenant_id=self.tenant_id)

    @property
    def engine(self) -> StepContext:
        """The engine's own step context (the lease, the raw counters)."""
        return self._base

    def spend(self, *, tokens: int = 0, cost_usd: float = 0.0) -> None:
        """Charge model usage to the run's budgets (recorded on this step's event)."""
        self._base.spend(tokens=tokens, cost_usd=cost_usd)

    def remember(
        self,
        *,
        subject_id: str,
        consent_basis: str,
        text: str | None = None,
        namespace: str | None = None,
        key: str | None = None,
        value: Any = None,
    ) -> Any:
        """write_memory from this step: a claim (namespace, key, value) or a note (text) about a
        subject, with run:<id>/step:<name> as its source. Screened and checked against the consent
        policy like every write (ClaimHeld, ClaimPending); a retried step writing the same again
        keeps nothing new. Returns the memory item."""
        from core.models import Tenant
        from memory.filememory import write_memory

        return write_memory(
            tenant=Tenant.objects.get(tenant_id=self.tenant_id),
            subject_id=subject_id,
            source=f"run:{self.run_id}/step:{self.step}",
            consent_basis=consent_basis,
            text=text,
            namespace=namespace,
            key=key,
            value=value,
            run_id=str(self.run_id),
        )

    def heartbeat(self) -> bool:
        """Renew the lease now; False if it was lost (the commit will be refused)."""
        return self._base.heartbeat()

    @property
    def lease_lost(self) -> bool:
        """True once the lease is gone: stop and return; nothing this step commits will count."""
        return self._base.lease_lost

    # The moves. `step` is a step function of this workflow (or its name).

    def next(
        self, step: AnyStep | str, state: object, *, say: tuple[str, dict[str, Any]] | None = None
    ) -> Next:
        """Commit `state` and continue at `step` (`say`: commit as that conversation event)."""
        return Next(self._definition.dump(state), self._definition.name_of(step), say=say)

    def suspend(
        self, state: object, reason: str, detail: str = "", *, resume_at: AnyStep | str | None = None
    ) -> Suspend:
        """Wait for a person or an outside event; a resume continues at `resume_at` (default: here)."""
        at = None if resume_at is None else self._definition.name_of(resume_at)
        return Suspend(self._definition.dump(state), reason, detail, step=at)

    def complete(self, state: object, result: Any = None) -> Complete:
        return Complete(self._definition.dump(state), result)

    def fail(self, state: object, code: str, detail: str = "") -> Fail:
        return Fail(self._definition.dump(state), code, detail)

    def sleep(
        self,
        step: AnyStep | str,
        state: object,
        *,
        seconds: float | None = None,
        until: datetime | None = None,
    ) -> Suspend:
        """Commit `state`, sleep durably for `seconds` (or until the aware datetime `until`), then
        continue at `step`. The run is suspended with reason `timer` and its wake time; the sweep
        wakes it when due (through resume verification), even after every worker restarted."""
        if (seconds is None) == (until is None):
            raise ValueError("sleep takes either seconds or until")
        if until is None:
            if seconds is None or seconds < 0:
                raise ValueError("a sleep cannot be negative")
            until = timezone.now() + timedelta(seconds=seconds)
        elif until.tzinfo is None:
            raise ValueError("until must be a timezone-aware datetime")
        return Suspend(
            self._definition.dump(state),
            TIMER,
            f"sleeping until {until.isoformat()}",
            step=self._definition.name_of(step),
            wake_at=until,
        )

    # Side effects.

    def operation(
        self,
        operation_id: str,
        *,
        tool: Tool,
        request: Mapping[str, Any],
        call: Callable[[OperationCall], Any],
    ) -> OperationOutcome:
        """Run one side effect under the operation protocol and return its settled outcome.

        `operation_id` is the idempotency key and must be stable across retries, resumes and forks
        (e.g. `refund:{order_id}`). Prepared once for this exact `request` (another request under the
        same id suspends the run: sending it would be a guess). Settled before: returned as it was.
        Started or unknown before (a crash, a timeout): reconciled by the tool's lookup first; an
        authoritative "applied" settles it, an authoritative "not applied" allows one more send,
        anything else suspends the run with `reconciliation_required` for a person. Only then is
        `call` made, and in a step declared `acts_on_approval=...` only if the state's approval is
        still approved, unexpired and for this very request (else the run goes back to the approving
        step to ask again): its return is the result, OperationRejected marks it failed, and any
        other exception marks it unknown and raises OperationOutcomeUnknown (the step is retried).
        """
        body = dict(request)
        tool = tool_in_force(tool)
        if tool.answers is not None:
            answer = tool.answers
            call = lambda sent: answer(body, sent)  # noqa: E731 - the stand-in answers, nothing is sent
        ids: dict[str, Any] = {"tenant_id": self.tenant_id, "operation_id": operation_id, "actor": self.actor}
        try:
            op = operation_prepare_once(
                tenant_id=self.tenant_id,
                run_id=self.run_id,
                step_id=self.step,
                operation_id=operation_id,
                tool_name=tool.name,
                tool_contract_version=tool.version,
                request=body,
                actor=self.actor,
            )
        except (OperationRequestChanged, OperationOfAnotherRun) as exc:
            raise _Suspension(exc.code, exc.message) from None
        if op.status == "succeeded":  # settled earlier: by this step before a crash, or by a person
            return OperationOutcome(operation_id, "succeeded", op.result, op.external_ref)
        if op.status == "failed":
            return OperationOutcome(operation_id, "failed", op.result)
        if op.status in ("started", "unknown"):
            found = tool.lookup(operation_id) if tool.lookup is not None else None
            if found is not None and found.authoritative and found.applied and found.external_ref:
                operation_mark_succeeded(
                    **ids,
                    external_ref=found.external_ref,
                    result=found.result,
                    note="reconciled: lookup found it applied",
                )
                return OperationOutcome(operation_id, "succeeded", found.result, found.external_ref)
            if found is None or not found.authoritative or found.applied is not False:
                if op.status == "started":
                    operation_mark_unknown(**ids, note="lookup not authoritative")
                why = "has no authoritative lookup" if found is None else "lookup is not authoritative"
                raise _Suspension(
                    "reconciliation_required",
                    f"operation {operation_id} may have been applied and the {tool.name} {why}; "
                    "check the external system and reconcile",
                    {"operation_id": operation_id},
                )
            try:
                operation_mark_not_applied(**ids, note="reconciled: authoritative lookup says not applied")
            except OperationInFlight as exc:  # the first call may still be on its way: ask again later
                wait = timedelta(seconds=float(exc.details.get("retry_after", 1)))
                raise _Suspension(exc.code, exc.message, wake_at=timezone.now() + wait) from None
        asked_at = self._definition.approving_step(self.step)
        if asked_at is not None:
            self._approval_in_force(asked_at, json_digest(body))
        key, label = str(self.run_id), tool.crash_label
        workspace_before_side_effect(run_id=self.run_id)
        crash_point(f"before_{label}_call", key=key)
        operation_mark_started(
            tenant_id=self.tenant_id,
            operation_id=operation_id,
            actor=self.actor,
            run_id=self.run_id,
            lease_epoch=self._base.lease.grant.epoch,
            call_timeout_s=tool.call_timeout(),
        )
        try:
            result = call(
                OperationCall(operation_id, lambda: crash_point(f"after_{label}_request_sent", key=key))
            )
        except OperationRejected as exc:
            operation_mark_failed(**ids, result=exc.result)
            return OperationOutcome(operation_id, "failed", exc.result)
        except Exception as exc:  # a timeout, a dropped connection, a 5xx: it may have been applied
            operation_mark_unknown(**ids, note=f"{type(exc).__name__}: {exc}"[:500], call_ended=True)
            raise OperationOutcomeUnknown(f"operation {operation_id}: {exc}") from None
        crash_point(f"after_{label}_response", key=key)
        ref = tool.external_ref(result)
        operation_mark_succeeded(**ids, external_ref=ref, result=result)
        return OperationOutcome(operation_id, "succeeded", result, ref)

    def _approval_in_force(self, asked_at: str, digest: str) -> None:
        """Raise _Rewind to `asked_at` unless the state's approval is approved, unexpired, for `digest`."""
        approval_id = (self._state.get("approval") or {}).get("approval_id")
        approval = Approval.objects.filter(approval_id=approval_id).first() if approval_id else None
        if (
            approval is not None
            and approval.status == ApprovalStatus.APPROVED
            and approval.expires_at > timezone.now()
            and approval.request_digest == digest
        ):
            return
        raise _Rewind(asked_at, ("approval",))

    # Approvals.

    def approval(
        self, request: Mapping[str, Any], *, reasons: Sequence[str] = (), auto_approve: str | None = None
    ) -> ApprovalDecision:
        """Ask a person to approve this exact request (bound by its digest, valid until it expires).

        Returns the decision once there is one; until then the run is suspended here (reason
        `approval_required`, or why an earlier approval cannot be used: expired, another digest) and
        this step runs again after the decision. `auto_approve` names a policy that approves at
        once, recorded as such (e.g. "auto_approve_below_limit").
        """
        digest = json_digest(dict(request))
        check = approval_check(
            run_id=self.run_id,
            tenant_id=self.tenant_id,
            step_id=self.step,
            request=dict(request),
            request_digest=digest,
            reasons=list(reasons),
            actor=self.actor,
        )
        approval = check.approval
        if check.verdict == "wait" and auto_approve:
            approval = approval_grant_automatically(approval=approval, policy=auto_approve)
        elif check.verdict == "wait":
            ref = _approval_ref(approval.approval_id, approval.status, approval.decided_by)
            raise _Suspension(check.reason, check.detail, {"approval": ref, "request_digest": digest})
        return ApprovalDecision(
            approval_id=approval.approval_id,
            approved=approval.status == ApprovalStatus.APPROVED,
            request_digest=digest,
            decided_by=approval.decided_by or None,
            note=approval.note,
        )

    # Signals.

    def wait_signal(self, name: str, *, timeout: float | None = None) -> Signal:
        """The next signal `name` sent to this run (POST /api/v1/runs/{id}/signals/{name}) that this
        run has not consumed yet, in the order they arrived; one sent before the run waits is kept
        and handed over here. Until there is one the run is suspended here (reason `signal`) and this
        step runs again when it arrives. With `timeout` (seconds, counted from the first wait) the
        run wakes by itself then and gets a Signal whose `.timed_out` is True (no payload)."""
        if name not in self._definition.signal_names:
            raise WorkflowSignalUndeclared(name)
        cursor, deadlines = self._signals_seen(self.engine_patch.get(SIGNALS_KEY))
        event = (
            AgentEvent.objects.filter(
                run_id=self.run_id,
                event_type="signal_received",
                payload__signal=name,
                seq__gt=int(cursor.get(name, 0)),
            )
            .order_by("seq")
            .first()
        )
        if event is not None:
            cursor[name] = event.seq
            deadlines.pop(name, None)
            self.engine_patch[SIGNALS_KEY] = self._signals_kept(cursor, deadlines)
            return Signal(name, event.payload.get("payload"), event.seq)
        deadline = deadlines.get(name)
        if deadline is None and timeout is not None:
            if timeout < 0:
                raise ValueError("a signal timeout cannot be negative")
            deadline = (timezone.now() + timedelta(seconds=timeout)).isoformat()
            deadlines[name] = deadline
        if deadline is not None and datetime.fromisoformat(deadline) <= timezone.now():
            deadlines.pop(name, None)
            self.engine_patch[SIGNALS_KEY] = self._signals_kept(cursor, deadlines)
            return Signal(name, timed_out=True, deadline=deadline)
        # Suspended here, this step runs again: what it consumed before this wait is not consumed
        # (the rerun must see it again); only this wait's deadline is kept.
        committed_cursor, committed_deadlines = self._signals_seen(None)
        if deadline is not None:
            committed_deadlines[name] = deadline
        raise _Suspension(
            SIGNAL,
            signal_wait_detail(name),
            {SIGNALS_KEY: self._signals_kept(committed_cursor, committed_deadlines)},
            wake_at=None if deadline is None else datetime.fromisoformat(deadline),
        )

    def _signals_seen(self, patch: Any) -> tuple[dict[str, int], dict[str, str]]:
        """(cursor: last consumed seq per signal, deadlines per wait) from `patch` or the state. A
        cursor written by another run (the state came with a fork) counts nothing: its seqs are not
        this run's."""
        seen = patch or self._state.get(SIGNALS_KEY) or {}
        if not isinstance(seen, dict):
            return {}, {}
        cursor = dict(seen.get("cursor") or {}) if seen.get("run_id") == str(self.run_id) else {}
        return cursor, dict(seen.get("deadlines") or {})

    def _signals_kept(self, cursor: dict[str, int], deadlines: dict[str, str]) -> State:
        return {"run_id": str(self.run_id), "cursor": cursor, "deadlines": deadlines}

    # Child runs.

    def start_child(
        self,
        workflow_name: str,
        *,
        input: Mapping[str, Any],
        child_id: str,
        version: str | None = None,
    ) -> ChildRun:
        """Start a run of `workflow_name` (newest version, or `version`) as this run's child, in this
        run's tenant, or return the one this run already started under the stable `child_id` (a
        retried or resumed step never starts two). The child runs on its own; `wait_child` waits for
        it, and cancelling this run cancels it. A workflow this tenant cannot see suspends the run
        (`child_workflow_unavailable`) and nothing is started."""
        try:
            return child_start(
                tenant_id=self.tenant_id,
                parent_run_id=self.run_id,
                owner=self.actor,
                epoch=self._base.lease.grant.epoch,
                workflow_name=workflow_name,
                workflow_version=version,
                input=dict(input),
                child_id=child_id,
            )
        except UnknownWorkflow as exc:
            raise _Suspension("child_workflow_unavailable", exc.message) from None
        except IdempotencyConflict:
            raise _Suspension(
                "child_request_changed",
                f"child {child_id!r} was started before with another input; a second child under the "
                "same id would be a guess",
            ) from None
        except InvalidInput as exc:  # the child's workflow refuses this input: retrying cannot help
            raise _Suspension("child_input_invalid", f"child {child_id!r}: {exc.message}") from None

    def wait_child(self, child: ChildRun) -> ChildOutcome:
        """The child's outcome once it finished (`.status` completed, failed or cancelled; `.result`).
        Until then the run is suspended here (reason `child_run`); the child's final commit asks it
        to resume, and this step runs again."""
        outcome = child_outcome(child_run_id=child.run_id)
        if outcome is None:
            raise _Suspension(CHILD_RUN, child_wait_detail(child.run_id))
        return outcome


class WorkflowSignalUndeclared(WorkflowDefinitionError):
    """A step waits for a signal its workflow does not declare (nobody could send it)."""

    def __init__(self, name: str):
        super().__init__(f"signal {name!r} is not declared by this workflow (workflow(..., signals=...))")
