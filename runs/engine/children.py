"""Child runs: a step starts a run of another workflow of its tenant and waits for its result; the
child finishing wakes its parent (trigger of migration 0019); cancelling a parent cancels its children."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction

from core.db import wire
from core.errors import InvalidInput
from core.tenancy import tenant_of_call
from runs.engine.runs import MAX_IDEMPOTENCY_KEY_LENGTH, run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import ConcurrentResume
from runs.kernel.models import TERMINAL_RUN_STATUSES, AgentRun, RunStatus

# The suspend reason of a run waiting for a child (ctx.wait_child); the detail names the child run.
CHILD_RUN = "child_run"
MAX_CHILD_KEY_LENGTH = 150


def child_wait_detail(child_run_id: UUID) -> str:
    """The suspend detail of a parent waiting for this child (the trigger of 0019 matches it exactly)."""
    return f"waiting for child run {child_run_id}"


def _idempotency_key(parent_run_id: UUID, child_key: str) -> str:
    key = f"child:{parent_run_id}:{child_key}"
    assert len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH
    return key


@dataclass(frozen=True)
class ChildRun:
    """A started child: its run id, the stable key it was started under, and its workflow."""

    run_id: UUID
    child_id: str
    workflow_name: str


@dataclass(frozen=True)
class ChildOutcome:
    """A finished child: `completed` (with its result), `failed` ({code, detail}) or `cancelled`."""

    run_id: UUID
    status: str
    result: Any

    @property
    def completed(self) -> bool:
        return self.status == RunStatus.COMPLETED


@tenant_of_call
def child_start(
    *,
    tenant_id: UUID,
    parent_run_id: UUID,
    owner: str,
    epoch: int,
    workflow_name: str,
    input: dict[str, Any],
    child_id: str,
    workflow_version: str | None = None,
) -> ChildRun:
    """Start (or find) the parent's child under `child_id`, in the parent's tenant, while `owner`
    still holds the parent at `epoch`. Idempotent by (parent, child_id): a retried step gets the
    same child. The workflow is looked up as the parent's tenant sees it (code, or its own external
    workflows), so another tenant's workflow is unknown here and nothing is stored."""
    if not isinstance(child_id, str) or not 0 < len(child_id.strip()) <= MAX_CHILD_KEY_LENGTH:
        raise InvalidInput(f"a child_id is 1 to {MAX_CHILD_KEY_LENGTH} characters", code="invalid_child_id")
    with transaction.atomic():
        subject = _parent_held(tenant_id=tenant_id, run_id=parent_run_id, owner=owner, epoch=epoch)
        if subject is None:
            raise ConcurrentResume(
                f"run {parent_run_id} is no longer running under this lease; no child was started",
                details={"run_id": str(parent_run_id)},
            )
        started = run_start(
            tenant=AgentRun.objects.get(run_id=parent_run_id).tenant,
            workflow_name=workflow_name,
            workflow_version=workflow_version,
            input=input,
            actor=f"run:{parent_run_id}",
            idempotency_key=_idempotency_key(parent_run_id, child_id),
            subject=subject,
        )
        apply(m.ChildLinked(started.run.run_id, parent_run_id, tenant_id))
    return ChildRun(started.run.run_id, child_id, started.run.workflow_name)


# The parent still running under this very lease, locked until the caller's transaction ends: a cancel
# of the parent waits for it (and then sees the new child), or came first and refuses it.
_PARENT_HELD = """
SELECT subject FROM agent_runs
 WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'running' AND lease_owner = %(owner)s
   AND lease_epoch = %(epoch)s
   FOR NO KEY UPDATE
"""


def _parent_held(*, tenant_id: UUID, run_id: UUID, owner: str, epoch: int) -> str | None:
    """Lock the parent run if `owner` still holds it at `epoch`; its subject, or None if it does not."""
    rows = wire.rows(_PARENT_HELD, {"tenant_id": tenant_id, "run_id": run_id, "owner": owner, "epoch": epoch})
    return rows[0][0] if rows else None


def child_outcome(*, child_run_id: UUID) -> ChildOutcome | None:
    """The child's outcome once it finished; None while it is still running or suspended."""
    row = AgentRun.objects.filter(run_id=child_run_id).values_list("status", "result").first()
    if row is None or row[0] not in TERMINAL_RUN_STATUSES:
        return None
    return ChildOutcome(child_run_id, row[0], row[1])
