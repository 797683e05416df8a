"""Every way a run moves, as a typed record. `runs.kernel.apply(move)` writes one, as one statement.

A move says what happened and what fences it: a lease holder's move names the lease (owner, epoch)
and the revision it read; a person's or the system's move names the statuses (or the revision) it
may start from. If the run is no longer where the move expects it, the statement matches no row and
nothing is written: apply() answers None (or False), never a half-written run.

A move that finds one run by its fence names the run's tenant as Keeper recorded it (the grant's,
the run row's, a sweep's, never a request's), and its statement finds the run by tenant and id: the
shard of a database distributed by tenant (docs/explanation/past-one-primary.md) is found from the
statement alone.

`Move[R]` says what apply() gives back for the move: mostly the seq of the event it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.records import Ending, LeaseGrant
from runs.kernel.state import EncodedState

R = TypeVar("R")


class Move(Generic[R]):
    """A way a run moves; R is what apply() returns for it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Held:
    """The fence of a lease holder's move: the run and its tenant (as the lease's grant read them), the
    lease (owner, epoch) and the revision read."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    revision: int
    attempt: int | None = None

    @classmethod
    def of(cls, grant: LeaseGrant, revision: int | None = None) -> Held:
        return cls(
            grant.run_id,
            grant.tenant_id,
            grant.owner,
            grant.epoch,
            grant.revision if revision is None else revision,
            grant.attempt,
        )

    def after(self, seq: int) -> Held:
        """The same lease at the revision a move just committed."""
        return Held(self.run_id, self.tenant_id, self.owner, self.epoch, seq, self.attempt)


# --- starting ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStarted(Move["tuple[Any, ...] | None"]):
    """A new run and its first event; its row's `columns` back, or None if the tenant already used the
    idempotency key. A suspend reason inserts it suspended (a fork not started)."""

    run_id: UUID
    tenant_id: UUID
    workflow_name: str
    workflow_version: str
    state_schema_version: int
    next_step: str
    state: EncodedState
    idempotency_key: str | None
    input_digest: str
    payload: dict[str, Any]
    actor: str
    parent_run_id: UUID | None = None
    fork_seq: int | None = None
    fork_expires_at: datetime | None = None
    event_type: str = "run_started"
    suspend_reason: str | None = None
    subject: str = ""
    replay: bool = False  # an evaluation's replay (runs/evaluation/): never real work, never a webhook
    columns: tuple[str, ...] = ("run_id",)


# --- leases: no event (nothing happened that history needs to know) --------------------------------


@dataclass(frozen=True, slots=True)
class LeaseTaken(Move["LeaseGrant | None"]):
    """Take the run if it is running (or suspended with a resume request), unleased or expired, and due.

    The epoch grows by one and `attempt` counts tries at the step. Keeper's workers take only runs of
    workflows in code; outside workers (`external`) only the others."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    ttl: float
    external: bool = False


@dataclass(frozen=True, slots=True)
class LeaseRenewed(Move["datetime | None"]):
    """Extend a lease still held at this epoch; None if it was lost."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    ttl: float


@dataclass(frozen=True, slots=True)
class LeaseReleased(Move[bool]):
    """Give the run back without an event. A release is not a failed attempt: the try it counted is
    given back, unless `attempted` (the holder tried and failed, and retries after `retry_in`)."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    retry_in: float = 0.0
    attempted: bool = False


@dataclass(frozen=True, slots=True)
class LeaseDeferred(Move[bool]):
    """Nothing could be decided yet (an operation's call may still be in flight): the lease is left
    expired, with its try given back, and the run is due again in `retry_in` seconds, so whoever takes
    it next takes it over and verifies it again."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    retry_in: float


# --- a lease holder's moves (the step commit: one prepared statement) --------------------------------


@dataclass(frozen=True, slots=True)
class StepCommitted(Move["int | None"]):
    """A step moved on to `next_step`. With `keep_lease` the holder runs that step next, in the same
    slice (it counts as that step's first attempt)."""

    held: Held
    state: EncodedState
    step_id: str
    next_step: str
    payload: dict[str, Any]
    event_type: str = "step_completed"
    keep_lease: bool = False


@dataclass(frozen=True, slots=True)
class Suspended(Move["int | None"]):
    """The run waits (for a person, a signal, a timer, a child...) and resumes at `resume_at`.

    `step_id` is the step that asked, or None when Keeper suspends the run itself (too many attempts,
    a budget, an invalid result...); those keep the attempt count. With `wake_in` the run asks to be
    resumed by "timer" once that many seconds have passed."""

    held: Held
    state: EncodedState
    resume_at: str
    reason: str
    detail: str
    payload: dict[str, Any]
    step_id: str | None = None
    wake_in: float | None = None


@dataclass(frozen=True, slots=True)
class Completed(Move[Ending | None]):
    held: Held
    state: EncodedState
    step_id: str
    result: Any
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failed(Move["int | None"]):
    held: Held
    state: EncodedState
    step_id: str
    code: str
    detail: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StepErrored(Move["int | None"]):
    """A step raised: retried after `retry_in` seconds (the run stays running, unleased until then),
    or, with `retry_in` None, the run is suspended `step_error` with `detail`."""

    held: Held
    state: EncodedState
    step_id: str
    payload: dict[str, Any]
    retry_in: float | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ResumeVerified(Move["int | None"]):
    """Every resume check passed: the run is running again, still leased to the verifier."""

    held: Held
    state: EncodedState
    next_step: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResumeRefused(Move["int | None"]):
    """A resume check failed: the run stays suspended with the check's code. The event carries the
    last committed digest forward (`trusted_digest`), never a state changed outside the engine."""

    held: Held
    state: EncodedState
    next_step: str
    reason: str
    detail: str
    payload: dict[str, Any]
    trusted_digest: str


@dataclass(frozen=True, slots=True)
class StateMigrated(Move["int | None"]):
    """One hop of a state-schema migration, to `to_version`; the holder keeps the lease."""

    held: Held
    state: EncodedState
    next_step: str
    to_version: int
    payload: dict[str, Any]


WorkerMove = (
    StepCommitted
    | Suspended
    | Completed
    | Failed
    | StepErrored
    | ResumeVerified
    | ResumeRefused
    | StateMigrated
)


# --- people and the system, fenced by status ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusChanged(Move["int | None"]):
    """A person's or the system's transition (cancel, suspend, fail, resume request, fork expiry,
    rewind...), fencing out any worker that holds the run. The state does not change; the event
    carries the run's current state digest. With `request_resume` the run stays suspended and is
    marked for a worker to verify and resume."""

    run_id: UUID
    tenant_id: UUID
    from_statuses: tuple[str, ...]
    to_status: str
    event_type: str
    actor: str
    payload: dict[str, Any]
    expected_revision: int | None = None
    suspend_reason: str | None = None
    suspend_detail: str | None = None
    result: Any = None
    next_step: str | None = None
    request_resume: bool = False
    superseded_by: UUID | None = None
    only_if_reason: str | None = None
    only_if_fork_expired: bool = False
    unless_resume_pending: bool = False


@dataclass(frozen=True, slots=True)
class StateAccepted(Move["int | None"]):
    """A person accepted the stored state a run was refused for (it stays suspended `state_accepted`)."""

    run_id: UUID
    tenant_id: UUID
    expected_revision: int
    reasons: tuple[str, ...]
    state: EncodedState
    actor: str
    detail: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReconciliationCorrected(Move["int | None"]):
    """A person corrected an operation's reconciliation: the suspended run goes back to `next_step`,
    the step that made the operation's call, with `state`, the state that step began from (as a
    rewind would, but the same run), suspended `reconciliation_corrected`; with `request_resume` it is
    asked to resume, so a worker verifies it and runs the step again, which reads the corrected record
    (an operation is answered from its record, never sent again). Fenced by the revision the person
    read, a suspended run with no live lease and no resume pending, and an unerased subject."""

    run_id: UUID
    tenant_id: UUID
    expected_revision: int
    state: EncodedState
    next_step: str
    detail: str
    payload: dict[str, Any]
    actor: str
    request_resume: bool = True


@dataclass(frozen=True, slots=True)
class SubjectErased(Move["int | None"]):
    """The redacted state in place; an active run is left suspended `subject_erased`, unleased."""

    run_id: UUID
    tenant_id: UUID
    expected_revision: int
    state: EncodedState
    subject: str
    result: Any
    idempotency_key: str | None
    detail: str
    old_detail: str
    payload: dict[str, Any]
    actor: str


@dataclass(frozen=True, slots=True)
class WorkspaceMerged(Move["int | None"]):
    """A branch's workspace merged into this run (`workspace_merged`: the new files' snapshot is written
    at this seq, in the same transaction), or the conflicts it left recorded
    (`workspace_merge_conflicted`). Fenced by the revision read and by no live lease: a worker holding
    the run may keep files it has not saved yet. `state` is the merged state (None: the run's own).
    With `wait` a running run is suspended `merge_conflicts` until they are resolved; with `resume`
    a run suspended for them is asked to resume."""

    run_id: UUID
    tenant_id: UUID
    expected_revision: int
    event_type: str
    payload: dict[str, Any]
    actor: str
    state: EncodedState | None = None
    wait: bool = False
    resume: bool = False
    detail: str = ""


# --- events that do not change the state -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageAppended(Move["int | None"]):
    """A conversation event (a message, a tool result) on an active run; a worker mid-step is fenced
    out and reruns the step with it. A client message id used before raises IntegrityError."""

    run_id: UUID
    tenant_id: UUID
    event_type: str
    payload: dict[str, Any]
    actor: str
    client_message_id: str


@dataclass(frozen=True, slots=True)
class UsageCharged(Move["int | None"]):
    """A model call made outside any step (fact extraction after a run...), as a `model_usage` event."""

    run_id: UUID
    tenant_id: UUID
    payload: dict[str, Any]
    actor: str


@dataclass(frozen=True, slots=True)
class SignalDelivered(Move["tuple[int, bool] | None"]):
    """A `signal_received` event; a run suspended waiting for exactly this signal (`waiting_detail`)
    is asked to resume now. (seq, woken); a key used before on this run raises IntegrityError."""

    run_id: UUID
    tenant_id: UUID
    waiting_detail: str
    payload: dict[str, Any]
    actor: str
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class ChildLinked(Move[bool]):
    """Mark a run as the child of another of the same tenant."""

    child_run_id: UUID
    parent_run_id: UUID
    tenant_id: UUID


@dataclass(frozen=True, slots=True)
class EventsCopied(Move[int]):
    """A fork's copy of its parent's conversation events up to the fork point, after its first event
    (each keeps its actor and names its source); the fork's revision moves past them. The number
    copied (0 if the fork moved on meanwhile)."""

    run_id: UUID
    tenant_id: UUID
    source_run_id: UUID
    up_to_seq: int
    event_types: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EventRedacted(Move[bool]):
    """Erasure rewrites one event's columns (`changes`: payload, state, client_message_id, actor);
    the event's `rewrites` count moves (a trigger), so summaries over it are checked again."""

    run_id: UUID
    seq: int
    changes: dict[str, Any]


# --- LangGraph threads ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointPut(Move["int | None"]):
    """A graph's checkpoint (keeper_langgraph_put): the run's next revision, with an event when a
    person made it (`payload_json`); None when the run takes no more checkpoints."""

    tenant_id: UUID
    run_id: UUID
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint_json: str
    metadata_json: str
    blob_index_json: str
    blobs: list[bytes | None]
    payload_json: str | None
    actor: str


@dataclass(frozen=True, slots=True)
class InterruptAsked(Move[bool]):
    """A root task's interrupt(): its writes go in and the thread's run waits for a person, unless the
    thread moved past this checkpoint. False when the run takes no more checkpoints."""

    tenant_id: UUID
    run_id: UUID
    writes: dict[str, Any]  # the task's writes, as langgraph_writes takes them
    detail: str
    payload: dict[str, Any]
    actor: str


@dataclass(frozen=True, slots=True)
class InterruptAnswered(Move["int | None"]):
    """A person answered one of the thread's interrupts, at the revision read with it. The last answer
    of a superstep moves the run to `langgraph_answered` (the answers wait for the graph); an earlier
    one keeps it waiting (`reason` and `detail` say which)."""

    run_id: UUID
    tenant_id: UUID
    expected_revision: int
    reason: str
    detail: str
    payload: dict[str, Any]
    actor: str


@dataclass(frozen=True, slots=True)
class ThreadDeleted(Move[bool]):
    """LangGraph's delete_thread: the thread's checkpoints, its run and the run's events go."""

    tenant_id: UUID
    thread_id: str
    thread_key: str


# --- operators ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryImported(Move[int]):
    """A recorded history as a new run that never runs here (`imported`); the number of events. A bulk
    restore, not a step: the rows go in as given (unsaved model instances)."""

    run: AgentRun
    events: list[AgentEvent]


@dataclass(frozen=True, slots=True)
class RunsPurged(Move["dict[str, int]"]):
    """Retention: these finished runs and everything that hangs off them go, in one transaction; how
    many rows of each model were deleted (Django's labels: "runs.AgentRun", "runs.ToolOperation"...)."""

    run_ids: tuple[UUID, ...]
    statuses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionsMade(Move["list[tuple[str, datetime, datetime, int]]"]):
    """A table's monthly partitions (agent_events, webhook_deliveries, console_audit_log) from `since`
    (or the default partition's oldest row) to `months_ahead` months past now, each made if missing
    with the rows the default partition held for it; (partition, from, to, rows moved) of each one made."""

    table: str
    since: datetime | None
    months_ahead: int


@dataclass(frozen=True, slots=True)
class PartitionDropped(Move["tuple[str, int]"]):
    """Retention: drop one month's partition of `table` if it ended before `cutoff` and nothing in it
    is still needed (agent_events: a run of that month not ended before the cutoff; webhook_deliveries:
    a pending delivery); dry_run: only say whether it would. (outcome, rows or runs that keep it)."""

    table: str
    partition: str
    cutoff: datetime
    dry_run: bool = False
    # As the owner role (DATABASES["owner"]): the audit log's months go only for the role that owns it,
    # as its rows could never be deleted by the application.
    as_owner: bool = False


@dataclass(frozen=True, slots=True)
class RunsRedispatched(Move["list[UUID]"]):
    """The sweep: runs that should be moving and are not, marked dispatched now (across tenants)."""

    grace: float
    limit: int


@dataclass(frozen=True, slots=True)
class StateAlteredOutside(Move[bool]):
    """Change a run's stored state (or its state-schema version) WITHOUT an event, as someone editing
    the table by hand would: what resume verification exists to catch (`state_digest_mismatch`,
    `unsupported_checkpoint`). For the demo and tests only; no service calls it."""

    run_id: UUID
    tenant_id: UUID
    state: dict[str, Any] | None = None
    state_schema_version: int | None = None
