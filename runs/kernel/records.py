"""What the kernel reads back: a lease it granted, an operation row. Plain values, no model instances."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class LeaseGrant:
    """A lease just taken: who holds the run, at which epoch, and the run as the taking statement saw it."""

    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    expires_at: datetime
    revision: int
    next_step: str
    state: dict[str, Any]
    status: str
    resume_requested_by: str
    workflow_name: str
    workflow_version: str
    state_schema_version: int
    attempt: int
    previous_owner: str | None
    previous_epoch: int
    child_of_run_id: UUID | None = None  # a child run: its parent may wait for it to finish
    replay: bool = False  # an evaluation's replay: its steps run with the replay's overrides

    @property
    def takes_over(self) -> bool:
        """Whether this grant continues a suspended run or one whose previous holder's lease expired:
        resume verification runs before anything else."""
        return self.status == "suspended" or self.previous_owner is not None


@dataclass(frozen=True)
class OperationRow:
    operation_id: str
    run_id: UUID
    status: str
    request_digest: str
    tool_contract_version: str
    external_ref: str | None
    result: Any
    attempts: int
    tool_name: str = ""
    started_at: datetime | None = None
    call_deadline_at: datetime | None = None


@dataclass(frozen=True)
class Ending:
    """A run's completion as written: the seq of its event, and whether the run answered a turn (an
    assistant message) before it; None where the commit could not say (behind a transaction pooler its
    function returns the seq alone)."""

    seq: int
    answered: bool | None
