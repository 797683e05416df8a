"""Starting runs and moving them by hand: cancel, suspend, resume, fail. Each writes one event."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import JSONField

from core.digests import MAX_JSON_DEPTH, json_depth_over, json_digest
from core.errors import InvalidInput
from core.ids import uuid7
from core.models import Tenant
from core.tenancy import tenant_bound, tenant_of_call
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.registry import Workflow, registry
from runs.engine.selectors import run_get
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.budgets import Budgets, budgets_initial
from runs.kernel.errors import (
    IdempotencyConflict,
    InvalidState,
    InvalidTransition,
    RunImported,
    RunNotFound,
    SubjectErased,
)
from runs.kernel.models import SUBJECT_ERASED, AgentRun, RunStatus
from runs.kernel.state import state_encode

MAX_IDEMPOTENCY_KEY_LENGTH = 200
# The keys Keeper gives the runs it starts itself: a LangGraph thread's run (runs.langgraph), a child
# run (runs.engine.children), a schedule's slot (runs.engine.schedules). A client's run under one of
# them would take that run's place: the thread, child or slot would find a run that is not its own.
RESERVED_KEY_PREFIXES = ("langgraph:", "child:", "schedule:", "fork:")


def client_idempotency_key(key: str | None) -> str | None:
    """A client's idempotency key (the API's header, start_run's option), refused in Keeper's own
    namespaces (RESERVED_KEY_PREFIXES)."""
    if key is not None and key.startswith(RESERVED_KEY_PREFIXES):
        raise InvalidInput(
            f"idempotency keys starting with {', '.join(RESERVED_KEY_PREFIXES)} are Keeper's own "
            "(LangGraph threads, child runs, schedules, forks); choose another",
            code="reserved_idempotency_key",
        )
    return key


@dataclass(frozen=True)
class StartedRun:
    run: AgentRun
    created: bool


def run_input_check(workflow: Workflow, input: dict[str, Any]) -> Budgets:
    """What run_start refuses of an input (schedules check theirs with it when they are written);
    the run's budgets, which the engine keeps in the state (the input may set their limits)."""
    if json_depth_over(input):
        raise InvalidInput(
            f"input nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays", code="input_too_deep"
        )
    state_encode(input)  # plain JSON, no secrets, bounded: before any workflow rule looks at it
    if workflow.validate_input is not None:
        workflow.validate_input(input)
    return budgets_initial(defaults=workflow.default_budgets, requested=input.get("budgets"))


@tenant_of_call
def run_start(
    *,
    tenant: Tenant,
    workflow_name: str,
    input: Any,
    actor: str,
    idempotency_key: str | None = None,
    workflow_version: str | None = None,
    subject: str = "",
) -> StartedRun:
    """Start a run of the newest (or the given) workflow version; idempotent per tenant + key.

    The same key with the same request returns the first run; with a different request it is a
    conflict. Nothing is written unless the whole request is valid.
    """
    workflow = registry.get(workflow_name, workflow_version)
    if not isinstance(input, dict):
        raise InvalidState(f"input must be a JSON object, not {type(input).__name__}")
    if idempotency_key is not None and not 0 < len(idempotency_key.strip()) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidInput(
            f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters",
            code="invalid_idempotency_key",
        )
    budgets = run_input_check(workflow, input)
    encoded = state_encode({**input, "budgets": budgets})
    input_digest = json_digest({"workflow": workflow.name, "input": input})

    run_id = uuid7()
    row = apply(
        m.RunStarted(
            run_id=run_id,
            tenant_id=tenant.tenant_id,
            workflow_name=workflow.name,
            workflow_version=workflow.version,
            state_schema_version=workflow.state_schema_version,
            next_step=workflow.first_step,
            state=encoded,
            idempotency_key=idempotency_key,
            input_digest=input_digest,
            payload={
                "workflow": workflow.name,
                "workflow_version": workflow.version,
                "input_digest": input_digest,
                "state_schema_version": workflow.state_schema_version,
                "idempotency_key": idempotency_key,
                # What the definition accepts, kept with the run: signals are stored for it even
                # while a deployment lacks its version.
                "signals": sorted(workflow.signals),
            },
            actor=actor,
            subject=subject,
            columns=RUN_COLUMNS,
        )
    )
    if row is None:
        existing = AgentRun.objects.get(tenant=tenant, idempotency_key=idempotency_key)
        # The same request: the same workflow and input, about the same person, and of the version it
        # named if it named one (without one it asks for the newest, which a retry after a deploy may
        # find changed): another subject or version must not get the first run back.
        differs = [
            what
            for what, same in (
                ("workflow", existing.workflow_name == workflow.name),
                ("input", existing.input_digest == input_digest or existing.workflow_name != workflow.name),
                ("subject", existing.subject == subject),
                (
                    "workflow_version",
                    workflow_version is None or existing.workflow_version == workflow.version,
                ),
            )
            if not same
        ]
        if differs:
            raise IdempotencyConflict(
                f"idempotency key {idempotency_key!r} was already used for a different request "
                f"(run {existing.run_id}; its {' and '.join(differs)} differ{'s' if len(differs) == 1 else ''})",
                details={"run_id": str(existing.run_id), "differs": differs},
            )
        return StartedRun(existing, created=False)
    run_enqueue_on_commit(run_id=run_id)
    return StartedRun(_run_from_row(row), created=True)


RUN_COLUMNS = tuple(str(field.column) for field in AgentRun._meta.concrete_fields)


def _run_from_row(row: tuple[Any, ...]) -> AgentRun:
    """The run as the ORM would load it, from the row its insert returned (no second round trip)."""
    fields = AgentRun._meta.concrete_fields
    values = [
        json.loads(value, cls=field.decoder)  # as JSONField.from_db_value decodes it
        if isinstance(value, str) and isinstance(field, JSONField)
        else value
        for field, value in zip(fields, row, strict=True)
    ]
    return AgentRun.from_db(connection.alias, [field.attname for field in fields], values)


# The person's action each transition event stands for, for refusal messages.
_ACTIONS = {
    "run_cancelled": "cancel",
    "resume_requested": "resume",
    "run_suspended": "suspend",
    "run_failed": "fail",
}


def _transition(
    *,
    run_id: UUID,
    from_statuses: tuple[str, ...],
    to_status: str,
    event_type: str,
    actor: str,
    note: str,
    **kwargs: Any,
) -> AgentRun:
    # The run's own tenant: each service that moves a run works as it (tenant_of_call binds its row's).
    tenant_id = tenant_bound()
    seq = apply(
        m.StatusChanged(
            run_id=run_id,
            tenant_id=tenant_id,
            from_statuses=from_statuses,
            to_status=to_status,
            event_type=event_type,
            actor=actor,
            payload={"note": note, **{k: v for k, v in kwargs.items() if k.startswith("suspend_")}},
            **kwargs,
        )
    )
    run = AgentRun.objects.filter(run_id=run_id, tenant_id=tenant_id).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    if seq is None and run.imported:
        raise RunImported(
            f"run {run_id} is an imported history copy: it never runs here, so it cannot "
            f"{_ACTIONS.get(event_type, event_type)}; fork it to continue from any of its events",
            details={"status": run.status, "imported": True},
        )
    if seq is None and run.suspend_reason == SUBJECT_ERASED and kwargs.get("request_resume"):
        raise SubjectErased(
            f"run {run_id} cannot resume: its subject was erased and its content redacted; start a new run "
            "if the customer asks again",
            details={"status": run.status, "suspend_reason": run.suspend_reason},
        )
    if seq is None and kwargs.get("unless_resume_pending") and run.resume_requested_at is not None:
        # One request until a worker takes it: ten clicks on resume are not ten requests and ten audit
        # entries.
        raise InvalidTransition(
            f"run {run_id}: {run.resume_requested_by or 'someone'} already asked it to resume at "
            f"{run.resume_requested_at:%Y-%m-%d %H:%M:%S} UTC; a worker is verifying it",
            code="resume_pending",
            details={"status": run.status, "resume_requested_by": run.resume_requested_by},
        )
    if seq is None:
        raise InvalidTransition(
            f"run {run_id} is {run.status}; {_ACTIONS.get(event_type, event_type)} needs it to be "
            + " or ".join(from_statuses),
            details={"status": run.status},
        )
    return run


@tenant_of_call
def run_cancel(*, run_id: UUID, actor: str, note: str = "") -> AgentRun:
    """Stop a running or suspended run for good. A worker mid-step can no longer commit.

    Its child runs still running or suspended (and theirs) are cancelled with it, in the same
    transaction; a child its step is starting right now waits for this and is then refused."""
    with transaction.atomic():
        _lock_descendants(run_id)
        run = _transition(
            run_id=run_id,
            from_statuses=(RunStatus.RUNNING, RunStatus.SUSPENDED),
            to_status=RunStatus.CANCELLED,
            event_type="run_cancelled",
            actor=actor,
            note=note,
        )
        _cancel_children(run_id, actor=actor)
    _parent_wake_on_commit(run)
    return run


def _active_children(run_ids: list[UUID]) -> list[UUID]:
    # a child is of its parent's tenant, the one bound (tenant_of_call)
    return list(
        AgentRun.objects.filter(
            tenant_id=tenant_bound(),
            child_of_id__in=run_ids,
            status__in=(RunStatus.RUNNING, RunStatus.SUSPENDED),
        ).values_list("run_id", flat=True)
    )


def _lock_descendants(run_id: UUID) -> None:
    """Lock the run's active descendants, deepest first, before the run itself: a finishing child
    locks itself and then its parent (trigger of migration 0019), so taking them in that same order
    here means a cancel and a child's final commit never deadlock."""
    levels, frontier = [], [run_id]
    while frontier := _active_children(frontier):
        levels.append(frontier)
    for level in reversed(levels):
        list(
            AgentRun.objects.select_for_update()
            .filter(tenant_id=tenant_bound(), run_id__in=level)
            .order_by("run_id")
            .values_list("pk")
        )


def _cancel_children(run_id: UUID, *, actor: str) -> None:
    for child in _active_children([run_id]):
        try:
            with transaction.atomic():
                _transition(
                    run_id=child,
                    from_statuses=(RunStatus.RUNNING, RunStatus.SUSPENDED),
                    to_status=RunStatus.CANCELLED,
                    event_type="run_cancelled",
                    actor=actor,
                    note=f"its parent run {run_id} was cancelled",
                )
        except InvalidTransition:  # it finished meanwhile: nothing left to cancel
            continue
        _cancel_children(child, actor=actor)


def run_parent_wake(*, run_id: UUID) -> None:
    """Send the wake-up of the parent that this finished child run asked to resume. The request
    itself was written with the child's final commit (trigger of migration 0019); if this message is
    lost, the sweep sends it."""
    parent = (
        AgentRun.objects.filter(children__run_id=run_id, status=RunStatus.SUSPENDED)
        .exclude(resume_requested_at=None)
        .values_list("run_id", flat=True)
        .first()
    )
    if parent is not None:
        run_enqueue_on_commit(run_id=parent)


def _parent_wake_on_commit(run: AgentRun) -> None:
    if run.child_of_id is not None:
        run_parent_wake(run_id=run.run_id)


@tenant_of_call
def run_suspend(*, run_id: UUID, actor: str, reason: str, detail: str = "") -> AgentRun:
    """Pause a running run for a person; the step in flight (if any) is fenced out and reruns on resume."""
    if not reason:
        raise InvalidInput("a suspension needs a reason code", code="reason_required")
    return _transition(
        run_id=run_id,
        from_statuses=(RunStatus.RUNNING,),
        to_status=RunStatus.SUSPENDED,
        event_type="run_suspended",
        actor=actor,
        note=detail,
        suspend_reason=reason,
        suspend_detail=detail,
    )


@tenant_of_call
def run_resume(*, run_id: UUID, actor: str, note: str = "") -> AgentRun:
    """Ask for a suspended run to continue. It stays suspended until a worker has verified it
    (resume verification: the run continues only if every check passes, else it says why)."""
    current = run_get(run_id=run_id)
    registry.refuse_outside(workflow_name=current.workflow_name, run_id=run_id, action="resumed")
    run = _transition(
        run_id=run_id,
        from_statuses=(RunStatus.SUSPENDED,),
        to_status=RunStatus.SUSPENDED,
        event_type="resume_requested",
        actor=actor,
        note=note,
        request_resume=True,
        unless_resume_pending=True,
    )
    run_enqueue_on_commit(run_id=run_id)  # inside a caller's transaction, the wake-up waits for its commit
    return run


@tenant_of_call
def run_fail(*, run_id: UUID, actor: str, code: str, detail: str = "") -> AgentRun:
    """Mark a run failed by hand (an operator gives up on it)."""
    if not code:
        raise InvalidInput("a failure needs a code", code="reason_required")
    run = _transition(
        run_id=run_id,
        from_statuses=(RunStatus.RUNNING, RunStatus.SUSPENDED),
        to_status=RunStatus.FAILED,
        event_type="run_failed",
        actor=actor,
        note=detail,
        result={"code": code, "detail": detail},
    )
    _parent_wake_on_commit(run)
    return run
