"""A run's history is a tree: fork a child from any committed event, or rewind (a fork that supersedes).

The child starts from the exact state committed at that seq (rebuilt from the events and checked
against that event's digest). Side effects are not forked: operations keep their stable ids, so a
child reaching a refund its parent already made finds it succeeded and never pays twice.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Protocol, cast

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from core.ids import uuid7
from core.tenancy import tenant_bind, tenant_of_call, tenant_scope
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.registry import registry
from runs.engine.runs import MAX_IDEMPOTENCY_KEY_LENGTH, StartedRun
from runs.engine.selectors import run_get
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import IdempotencyConflict, InvalidTransition, RunImported, SubjectErased
from runs.kernel.models import AgentEvent, AgentRun, RunStatus
from runs.kernel.state import state_encode


class ForkStateMismatch(Conflict):
    """The events do not rebuild the state their digest names: the history was changed."""

    code = "fork_state_mismatch"


def _state_at(run: AgentRun, seq: int) -> tuple[dict[str, object], str | None, int]:
    """The state, next step and state-schema version as they were right after event `seq`."""
    event = AgentEvent.objects.filter(run=run, seq=seq).first()
    if event is None:
        raise InvalidInput(
            f"run {run.run_id} has no event {seq} (it has 1..{run.state_revision})", code="invalid_seq"
        )
    source = (
        AgentEvent.objects.filter(run=run, seq__lte=seq, state__isnull=False)
        .order_by("-seq")
        .values("state")
        .first()
    )
    if source is None:
        raise ForkStateMismatch(f"no event at or before {seq} of run {run.run_id} stores a state")
    state = cast("dict[str, object]", source["state"])  # state__isnull=False: a stored JSON object
    if state_encode(state).digest != event.state_digest:
        raise ForkStateMismatch(
            f"the state rebuilt at event {seq} does not match its digest {event.state_digest}"
        )
    migrated = (
        AgentEvent.objects.filter(run=run, seq__lte=seq, event_type="state_migrated").order_by("-seq").first()
    )
    started = AgentEvent.objects.filter(run=run, seq=1).values_list("payload", flat=True).first() or {}
    if migrated is not None:
        version = int(migrated.payload["to_version"])
    elif "state_schema_version" in started:
        version = int(started["state_schema_version"])
    elif not AgentEvent.objects.filter(run=run, event_type="state_migrated").exists():
        version = run.state_schema_version
    else:
        raise ForkStateMismatch(
            f"the state-schema version at event {seq} of run {run.run_id} is not recorded"
        )
    return state, event.next_step, version


def _carried(state: dict[str, object]) -> dict[str, float]:
    """What the parent had spent up to the fork: the child's log starts with it, so its budgets
    recompute from its own events."""
    budgets = state.get("budgets")
    if not isinstance(budgets, dict):
        return {}
    return {kind: b.get("used") or 0 for kind, b in budgets.items() if isinstance(b, dict)}


class ForkCopier(Protocol):
    def __call__(
        self, *, parent: AgentRun, child_id: uuid.UUID, at_seq: int, next_step: str, state_digest: str
    ) -> int: ...


_copiers: list[ForkCopier] = []


def fork_copier_register(copier: ForkCopier) -> None:
    """Give every new fork what a part above the engine keeps beside the state (conversations
    register the copy of a conversation's messages, in runs' AppConfig.ready). A copier runs in the
    fork's transaction and returns how many events it wrote after the fork's first."""
    if copier not in _copiers:
        _copiers.append(copier)


FORK_KEY_PREFIX = "fork:"  # a fork's own idempotency key, beside run_start's (runs.RESERVED_KEY_PREFIXES)


def _fork_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not 0 < len(key.strip()) <= MAX_IDEMPOTENCY_KEY_LENGTH - len(FORK_KEY_PREFIX):
        raise InvalidInput(
            f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH - len(FORK_KEY_PREFIX)} characters",
            code="invalid_idempotency_key",
        )
    return FORK_KEY_PREFIX + key


def _fork_made(*, tenant_id: uuid.UUID, key: str, parent_id: uuid.UUID, at_seq: int) -> AgentRun | None:
    """The fork an earlier request with this key made, if any; the same key for another fork is a
    conflict (the key names one request, as run_start's does)."""
    made = AgentRun.objects.filter(tenant_id=tenant_id, idempotency_key=key).first()
    if made is None:
        return None
    if made.parent_run_id != parent_id or made.fork_seq != at_seq:
        raise IdempotencyConflict(
            f"idempotency key {key.removeprefix(FORK_KEY_PREFIX)!r} was already used for another request "
            f"(run {made.run_id})",
            details={"run_id": str(made.run_id)},
        )
    return made


@tenant_of_call
def run_fork(
    *,
    run_id: uuid.UUID,
    at_seq: int,
    actor: str,
    start: bool = True,
    note: str = "",
    idempotency_key: str | None = None,
) -> AgentRun:
    """run_fork_once's run: the new fork, or the one this idempotency key already made."""
    return run_fork_once(
        run_id=run_id, at_seq=at_seq, actor=actor, start=start, note=note, idempotency_key=idempotency_key
    ).run


@tenant_of_call
def run_fork_once(
    *,
    run_id: uuid.UUID,
    at_seq: int,
    actor: str,
    start: bool = True,
    note: str = "",
    idempotency_key: str | None = None,
    replay: bool = False,
    state_patch: dict[str, object] | None = None,
) -> StartedRun:
    """A new run continuing from event `at_seq` of this one. Not started, it expires after a TTL.

    `replay` marks it an evaluation's replay (runs/evaluation/ writes what it replays in the same
    transaction); `state_patch` sets keys of the state it starts from (a replay's changed prompt).

    The child keeps the parent's subject (erasure and learning reach it) and carries the
    conversation up to `at_seq` as its own events, each naming the event it was copied from.
    With an idempotency key (the API's header, the console form's token), a request sent again
    gives back the fork the first one made (created False) instead of a second fork.
    """
    key = _fork_key(idempotency_key)
    parent = run_get(run_id=run_id)
    if key is not None:
        made = _fork_made(tenant_id=parent.tenant_id, key=key, parent_id=parent.run_id, at_seq=at_seq)
        if made is not None:
            return StartedRun(made, created=False)
    registry.refuse_outside(workflow_name=parent.workflow_name, run_id=run_id, action="forked or rewound")
    if parent.subject.startswith("erased:"):
        raise SubjectErased(
            f"run {run_id} cannot be forked or rewound: its subject was erased and its content redacted",
            details={"subject_erased": True},
        )
    state, next_step, schema_version = _state_at(parent, at_seq)
    if state_patch:
        state = {**state, **state_patch}
    if next_step is None:
        raise InvalidInput(
            f"nothing is left to run after event {at_seq} of run {run_id}", code="nothing_to_fork"
        )
    encoded = state_encode(state)
    child_id = uuid7()
    expires = None if start else timezone.now() + timedelta(seconds=settings.KEEPER_FORK_TTL)
    payload = {
        "parent_run_id": str(parent.run_id),
        "fork_seq": at_seq,
        "note": note,
        "state_schema_version": schema_version,
        "spent": _carried(state),
        **({"replay": True} if replay else {}),
    }
    with tenant_scope(parent.tenant_id):
        created = apply(
            m.RunStarted(
                run_id=child_id,
                tenant_id=parent.tenant_id,
                workflow_name=parent.workflow_name,
                workflow_version=parent.workflow_version,
                state_schema_version=schema_version,
                next_step=next_step,
                state=encoded,
                idempotency_key=key,
                input_digest=parent.input_digest,
                payload=payload,
                actor=actor,
                parent_run_id=parent.run_id,
                fork_seq=at_seq,
                fork_expires_at=expires,
                event_type="run_forked",
                suspend_reason=None if start else "fork_not_started",
                subject=parent.subject,
                replay=replay,
            )
        )
        if not created:  # the same key, sent at the same moment: the other request's fork
            assert key is not None  # only a key can collide
            made = _fork_made(tenant_id=parent.tenant_id, key=key, parent_id=parent.run_id, at_seq=at_seq)
            if made is None:
                raise InvalidTransition(f"the fork of run {run_id} with this key vanished; send it again")
            return StartedRun(made, created=False)
        for copy in _copiers:
            copy(
                parent=parent,
                child_id=child_id,
                at_seq=at_seq,
                next_step=next_step,
                state_digest=encoded.digest,
            )
        if start:
            run_enqueue_on_commit(run_id=child_id)
    return StartedRun(AgentRun.objects.get(run_id=child_id), created=True)


@tenant_of_call
def run_rewind(
    *, run_id: uuid.UUID, to_seq: int, actor: str, note: str = "", idempotency_key: str | None = None
) -> StartedRun:
    """Continue from event `to_seq` in a new run that supersedes this one; this one is kept, marked
    (and cancelled if it was still active). Sent again with the same idempotency key: the run the
    first request made (created False); without one, a second rewind is refused (already superseded)."""
    key = _fork_key(idempotency_key)
    with transaction.atomic():
        parent = AgentRun.objects.select_for_update().get(run_id=run_get(run_id=run_id).run_id)
        if key is not None:
            made = _fork_made(tenant_id=parent.tenant_id, key=key, parent_id=parent.run_id, at_seq=to_seq)
            if made is not None and parent.superseded_by_id == made.run_id:
                return StartedRun(made, created=False)
            if made is not None:  # the key made a fork of this run, not the run that supersedes it
                raise IdempotencyConflict(
                    f"idempotency key {idempotency_key!r} was already used for a fork of run {run_id}",
                    details={"run_id": str(made.run_id)},
                )
        if parent.imported:
            raise RunImported(
                f"run {run_id} is an imported history copy and never runs here; fork it instead (a fork runs)"
            )
        if parent.superseded_by_id is not None:
            raise InvalidTransition(f"run {run_id} was already superseded by {parent.superseded_by_id}")
        child = run_fork(
            run_id=run_id, at_seq=to_seq, actor=actor, note=note, idempotency_key=idempotency_key
        )
        active = parent.status in (RunStatus.RUNNING, RunStatus.SUSPENDED)
        seq = apply(
            m.StatusChanged(
                run_id=parent.run_id,
                tenant_id=parent.tenant_id,
                from_statuses=(parent.status,),
                to_status=RunStatus.CANCELLED if active else parent.status,
                event_type="run_superseded",
                actor=actor,
                payload={"superseded_by": str(child.run_id), "rewound_to_seq": to_seq, "note": note},
                superseded_by=child.run_id,
            )
        )
        if seq is None:
            raise InvalidTransition(f"run {run_id} changed while rewinding; nothing was written")
    return StartedRun(child, created=True)


def forks_expire() -> int:
    """Cancel forks that were never started before their TTL ran out (KEEPER_FORK_TTL), and forks
    that were started but left suspended, untouched, for KEEPER_FORK_STARTED_TTL (waiting for an
    approval or a person nobody sends). Returns how many were cancelled.

    Across tenants only ids come back; each is then cancelled in its own tenant, and the statement
    re-checks it (an unstarted fork: still unstarted, no start requested, expired; a started one:
    still at the revision it was found at, so a resume asked for or an event since leaves it alone).
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT run_id, tenant_id FROM keeper_forks_expired()")
        expired = cursor.fetchall()
        cursor.execute("SELECT * FROM keeper_forks_abandoned(%s)", [float(settings.KEEPER_FORK_STARTED_TTL)])
        abandoned = cursor.fetchall()
    cancelled = 0
    for run_id, tenant_id in expired:
        with tenant_bind(tenant_id):
            seq = apply(
                m.StatusChanged(
                    run_id=run_id,
                    tenant_id=tenant_id,
                    from_statuses=(RunStatus.SUSPENDED,),
                    to_status=RunStatus.CANCELLED,
                    event_type="fork_expired",
                    actor="system:fork-ttl",
                    payload={"reason": "fork TTL"},
                    only_if_reason="fork_not_started",
                    only_if_fork_expired=True,
                )
            )
        cancelled += seq is not None
    for run_id, tenant_id, revision in abandoned:
        with tenant_bind(tenant_id):
            run = AgentRun.objects.filter(run_id=run_id).values("suspend_reason", "updated_at").first()
            if run is None:
                continue
            payload = {
                "reason": "fork TTL: started, then suspended and untouched",
                "suspend_reason": run["suspend_reason"],
                "suspended_since": run["updated_at"].isoformat(),
                "ttl_s": float(settings.KEEPER_FORK_STARTED_TTL),
            }
            seq = apply(
                m.StatusChanged(
                    run_id=run_id,
                    tenant_id=tenant_id,
                    from_statuses=(RunStatus.SUSPENDED,),
                    to_status=RunStatus.CANCELLED,
                    event_type="fork_abandoned",
                    actor="system:fork-ttl",
                    payload=payload,
                    expected_revision=revision,
                )
            )
        cancelled += seq is not None
    return cancelled
