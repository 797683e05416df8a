"""The public authoring API: declare a workflow and its steps as plain functions, with side effects
(`ctx.operation`), human approvals (`ctx.approval`) and durable timers (`ctx.sleep`) in one call each.

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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar, cast, overload
from uuid import UUID

from django.utils import timezone

from core.crash import crash_point
from core.digests import json_digest
from core.errors import InvalidInput
from runs.engine.approvals import approval_check, approval_grant_automatically
from runs.engine.errors import WorkflowDefinitionError
from runs.engine.models import Approval, ApprovalStatus
from runs.engine.operations import (
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
    Step,
    StepContext,
    StepResult,
    Suspend,
    ToolContract,
    ToolLookup,
    Workflow,
    registry,
)
from runs.engine.state_migrations import SchemaSet

__all__ = [
    "ApprovalDecision",
    "Context",
    "Definition",
    "OperationCall",
    "OperationOutcome",
    "OperationOutcomeUnknown",
    "OperationRejected",
    "State",
    "StepResult",
    "TIMER",
    "Tool",
    "ToolLookup",
    "tool",
    "workflow",
]

S = TypeVar("S")
StepFunction = Callable[["Context", S], StepResult]
AnyStep = Callable[["Context", Any], StepResult]

# The suspend reason of a run that sleeps (ctx.sleep) until its wake time.
TIMER = "timer"

# Keys the engine keeps in every run's state; a typed state never sees them and cannot change them.
_ENGINE_KEYS = ("budgets",)


# --- control flow raised by the one-call helpers and turned into a step result by the wrapper ---


class _Suspension(Exception):
    """A helper decided the run waits (an approval, a reconciliation): the step's result is a
    suspension at this same step, with the state it was given plus `patch`."""

    def __init__(self, reason: str, detail: str, patch: State | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.patch = reason, detail, patch or {}


class _Rewind(Exception):
    """An approval lapsed before its side effect was sent: go back to the step that asked for it."""

    def __init__(self, step: str, drop: tuple[str, ...]):
        super().__init__(f"rewind to {step}")
        self.step, self.drop = step, drop


# --- side effects ---


class OperationRejected(Exception):
    """Raised by an operation's `call` for a definite refusal: nothing was applied (a 4xx). The
    operation is marked `failed` with `result`. Any other exception from `call` means nobody knows
    whether it was applied: the operation becomes `unknown`, never `failed`."""

    def __init__(self, message: str, *, result: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.result: dict[str, Any] = dict(result or {"message": message})


class OperationOutcomeUnknown(Exception):
    """The call may have been applied: the step is retried, and the retry reconciles first."""


@dataclass(frozen=True)
class Tool(ToolContract):
    """An external tool: its contract version (stored on every operation), its authoritative lookup
    by idempotency key (None: never retried automatically), how to read the external reference from
    a successful answer, and the label of its crash points (before_{label}_call,
    after_{label}_request_sent, after_{label}_response)."""

    external_ref: Callable[[Any], str] = dataclasses.field(default=lambda result: str(result["id"]))
    crash_label: str = "operation"


def tool(
    name: str,
    *,
    version: str,
    lookup: Callable[[str], ToolLookup] | None,
    external_ref: Callable[[Any], str] | None = None,
    crash_label: str = "operation",
) -> Tool:
    """Declare (and register, so resume verification can check and reconcile it) an external tool.

    A lookup that raises (the tool is down) counts as not authoritative: it proves nothing."""
    declared = Tool(
        name=name,
        version=version,
        lookup=None if lookup is None else _never_raising(lookup),
        external_ref=external_ref or (lambda result: str(result["id"])),
        crash_label=crash_label,
    )
    registry.register_tool(declared)
    return declared


def _never_raising(lookup: Callable[[str], ToolLookup]) -> Callable[[str], ToolLookup]:
    def ask(operation_id: str) -> ToolLookup:
        try:
            return lookup(operation_id)
        except Exception:  # an unreachable tool says nothing about whether the effect happened
            return ToolLookup(authoritative=False, applied=None)

    return ask


@dataclass(frozen=True)
class OperationCall:
    """What an operation's `call` gets: the idempotency key to send, and `sent()` to call once the
    request has left (a crash point: the worker may die after the effect, before the answer)."""

    idempotency_key: str
    sent: Callable[[], None]


@dataclass(frozen=True)
class OperationOutcome:
    """A settled operation: `succeeded` (with the external reference) or `failed` (refused)."""

    operation_id: str
    status: Literal["succeeded", "failed"]
    result: Any
    external_ref: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


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

    def __init__(self, base: StepContext, definition: Definition[Any], state: State):
        self._base = base
        self._definition = definition
        self._state = state

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
    def engine(self) -> StepContext:
        """The engine's own step context (the lease, the raw counters)."""
        return self._base

    def spend(self, *, tokens: int = 0, cost_usd: float = 0.0) -> None:
        """Charge model usage to the run's budgets (recorded on this step's event)."""
        self._base.spend(tokens=tokens, cost_usd=cost_usd)

    def heartbeat(self) -> bool:
        """Renew the lease now; False if it was lost (the commit will be refused)."""
        return self._base.heartbeat()

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
        except OperationRequestChanged as exc:
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
            operation_mark_not_applied(**ids, note="reconciled: authoritative lookup says not applied")
        asked_at = self._definition.approving_step(self.step)
        if asked_at is not None:
            self._approval_in_force(asked_at, json_digest(body))
        key, label = str(self.run_id), tool.crash_label
        crash_point(f"before_{label}_call", key=key)
        operation_mark_started(
            tenant_id=self.tenant_id,
            operation_id=operation_id,
            actor=self.actor,
            run_id=self.run_id,
            lease_epoch=self._base.lease.grant.epoch,
        )
        try:
            result = call(
                OperationCall(operation_id, lambda: crash_point(f"after_{label}_request_sent", key=key))
            )
        except OperationRejected as exc:
            operation_mark_failed(**ids, result=exc.result)
            return OperationOutcome(operation_id, "failed", exc.result)
        except Exception as exc:  # a timeout, a dropped connection, a 5xx: it may have been applied
            operation_mark_unknown(**ids, note=f"{type(exc).__name__}: {exc}"[:500])
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


# --- the definition ---


class Definition(Generic[S]):
    """A workflow being declared: its steps in order (the first is where a run starts)."""

    def __init__(
        self,
        name: str,
        *,
        version: str,
        state_type: type[S] | None = None,
        description: str = "",
        validate_input: Callable[[State], None] | None = None,
        schemas: SchemaSet | None = None,
        default_budgets: Mapping[str, float] | None = None,
    ):
        self.name, self.version, self.state_type = name, version, state_type
        self.description, self.validate_input, self.schemas = description, validate_input, schemas
        self.default_budgets = dict(default_budgets or {})
        self._steps: list[Step] = []
        self._names: dict[Callable[..., Any], str] = {}
        self._guarded: dict[str, AnyStep | str] = {}
        self._registered: Workflow | None = None

    @overload
    def step(self, fn: StepFunction[S]) -> StepFunction[S]: ...

    @overload
    def step(
        self, *, name: str | None = None, acts_on_approval: AnyStep | str | None = None
    ) -> Callable[[StepFunction[S]], StepFunction[S]]: ...

    def step(
        self,
        fn: StepFunction[S] | None = None,
        *,
        name: str | None = None,
        acts_on_approval: AnyStep | str | None = None,
    ) -> StepFunction[S] | Callable[[StepFunction[S]], StepFunction[S]]:
        """Declare a step: `@wf.step`, or `@wf.step(acts_on_approval=approve)` for a step that sends
        what the approval asked for in step `approve` allowed. Resume verification checks that
        approval before such a step runs, and `ctx.operation` checks it again before it sends; an
        approval that lapsed sends the run back to `approve`."""

        def declare(function: StepFunction[S]) -> StepFunction[S]:
            if self._registered is not None:
                raise WorkflowDefinitionError(f"workflow {self.name} is registered; declare steps before")
            step_name = name or function.__name__
            self._steps.append(Step(step_name, self._wrap(function)))
            self._names[function] = step_name
            if acts_on_approval is not None:
                self._guarded[step_name] = acts_on_approval
            return function

        return declare(fn) if fn is not None else declare

    def register(self) -> Workflow:
        """Build the engine's Workflow and register it (once; the first declared step starts)."""
        if self._registered is None:
            self._registered = registry.register(
                Workflow(
                    name=self.name,
                    version=self.version,
                    steps=tuple(self._steps),
                    state_schema_version=self.schemas.current if self.schemas is not None else 1,
                    validate_input=self._validate_input,
                    description=self.description,
                    schemas=self.schemas,
                    approval_guarded_steps=frozenset(self._guarded),
                    default_budgets=self.default_budgets,
                )
            )
        return self._registered

    def _validate_input(self, data: State) -> None:
        """The author's validation, then (typed state) whether the input makes that type."""
        if self.validate_input is not None:
            self.validate_input(data)
        if self.state_type is not None:
            try:
                self.load(data)
            except (TypeError, ValueError) as exc:
                raise InvalidInput(
                    f"the input does not fit {self.name}'s state ({self.state_type.__name__}): {exc}",
                    code="invalid_input",
                ) from None

    def approving_step(self, step: str) -> str | None:
        """The step that asks for the approval `step` acts on (None: it acts on none)."""
        asked_at = self._guarded.get(step)
        return None if asked_at is None else self.name_of(asked_at)

    def name_of(self, step: AnyStep | str) -> str:
        """The step's name: given by name, or a function declared with this definition's `step`."""
        if isinstance(step, str):
            return step
        found = self._names.get(step)
        if found is None:
            raise WorkflowDefinitionError(
                f"{getattr(step, '__name__', step)!r} is not a step of workflow {self.name}"
            )
        return found

    def load(self, state: State) -> S:
        """The step's view of the stored state: the typed state, or the dict itself."""
        if self.state_type is None:
            return cast(S, state)
        data = {k: v for k, v in state.items() if k not in _ENGINE_KEYS}
        validate = getattr(self.state_type, "model_validate", None)  # a pydantic model
        if validate is not None:
            return cast(S, validate(data))
        return self.state_type(**data)

    def dump(self, state: object) -> State:
        """The JSON dict to store for a step's new state (typed or plain)."""
        if isinstance(state, dict):
            return state
        dump = getattr(state, "model_dump", None)
        if dump is not None:
            return cast(State, dump(mode="json"))
        if dataclasses.is_dataclass(state) and not isinstance(state, type):
            return dataclasses.asdict(state)
        raise TypeError(f"a state is a dict, a dataclass or a pydantic model, not {type(state).__name__}")

    def _wrap(self, function: StepFunction[S]) -> Callable[[StepContext, State], StepResult]:
        def run(base: StepContext, state: State) -> StepResult:
            ctx = Context(base, self, state)
            try:
                return function(ctx, self.load(state))
            except _Suspension as wait:
                return Suspend({**state, **wait.patch}, wait.reason, wait.detail)
            except _Rewind as back:
                return Next({k: v for k, v in state.items() if k not in back.drop}, back.step)

        run.__name__ = run.__qualname__ = function.__name__
        run.__doc__ = function.__doc__
        return run


@overload
def workflow(
    name: str,
    *,
    version: str,
    state: None = None,
    description: str = "",
    validate_input: Callable[[State], None] | None = None,
    schemas: SchemaSet | None = None,
    default_budgets: Mapping[str, float] | None = None,
) -> Definition[State]: ...


@overload
def workflow(
    name: str,
    *,
    version: str,
    state: type[S],
    description: str = "",
    validate_input: Callable[[State], None] | None = None,
    schemas: SchemaSet | None = None,
    default_budgets: Mapping[str, float] | None = None,
) -> Definition[S]: ...


def workflow(
    name: str,
    *,
    version: str,
    state: Any = None,
    description: str = "",
    validate_input: Callable[[State], None] | None = None,
    schemas: SchemaSet | None = None,
    default_budgets: Mapping[str, float] | None = None,
) -> Definition[Any]:
    """Declare a workflow: name, version, the state's type (a dataclass or pydantic model; default a
    plain dict), input validation (raise core.errors.InvalidInput), and the state-schema versions
    with their migrations (`schemas`; the newest is the schema version new runs get)."""
    return Definition(
        name,
        version=version,
        state_type=state,
        description=description,
        validate_input=validate_input,
        schemas=schemas,
        default_budgets=default_budgets,
    )
