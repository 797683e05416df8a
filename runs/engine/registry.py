"""Workflows: a name, a version and ordered step functions. Steps return the next state and move.

A step function takes the step context and the run's state (a plain JSON dict) and returns one of
Next / Suspend / Complete / Fail. It must not keep anything that matters outside that state: the
state is what survives a crash. Clients, coroutines, exceptions and secrets never go into it; big
payloads go into the artifact store and the state keeps their digest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from packaging.version import InvalidVersion, Version

from runs.engine.state_migrations import SchemaSet
from runs.kernel.errors import DrivenOutside, UnknownWorkflow, WorkflowDefinitionError
from runs.kernel.outcomes import Complete as Complete
from runs.kernel.outcomes import Fail as Fail
from runs.kernel.outcomes import Next as Next
from runs.kernel.outcomes import Outcome
from runs.kernel.outcomes import State as State
from runs.kernel.outcomes import Suspend as Suspend

if TYPE_CHECKING:
    from runs.engine.leases import HeldLease


StepResult = Outcome


class StepFailed(Exception):
    """Raised by a step to fail the run on purpose (not retried)."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(detail or code)
        self.code = code
        self.detail = detail


@dataclass
class StepContext:
    run_id: UUID
    tenant_id: UUID
    workflow: Workflow
    step: str
    attempt: int
    revision: int
    lease: HeldLease
    tokens: int = 0
    cost_usd: float = 0.0

    def spend(self, *, tokens: int = 0, cost_usd: float = 0.0) -> None:
        """Charge model usage to the run's budgets (recorded on this step's event)."""
        if tokens < 0 or cost_usd < 0:
            raise ValueError("spending cannot be negative")
        self.tokens += tokens
        self.cost_usd += cost_usd

    def spent(self, *, wall_s: float) -> dict[str, float]:
        return {
            "steps": 1,
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 6),
            "wall_s": round(wall_s, 3),
        }

    def heartbeat(self) -> bool:
        """Renew the lease now; False if it was lost (the commit will be refused)."""
        return self.lease.renew()

    @property
    def lease_lost(self) -> bool:
        return self.lease.lost


StepFn = Callable[[StepContext, State], StepResult]


@dataclass(frozen=True)
class Step:
    name: str
    fn: StepFn


@dataclass(frozen=True)
class ToolLookup:
    """What the external system says about an operation, looked up by its idempotency key."""

    authoritative: bool
    applied: bool | None
    external_ref: str | None = None
    result: Any = None
    # Why the external system gave no answer at all (down, a 503, a timeout): a lookup that failed,
    # which a person reads apart from an answer that was not authoritative. "" when it answered.
    unavailable: str = ""


@dataclass(frozen=True)
class ToolContract:
    """An external tool's contract: its version (stored on every operation) and its lookup.

    A tool with no authoritative lookup (lookup=None) is never retried automatically.
    """

    name: str
    version: str
    lookup: Callable[[str], ToolLookup | None] | None = None  # None back: it cannot tell
    # The longest a call may take, in seconds or as a function of none that says it (read at each
    # start); None: KEEPER_OPERATION_CALL_TIMEOUT. Until that long after a start, a lookup's "not
    # applied" may describe a request still in flight and is not trusted.
    call_timeout_s: float | Callable[[], float] | None = None

    def call_timeout(self) -> float | None:
        return self.call_timeout_s() if callable(self.call_timeout_s) else self.call_timeout_s


SOURCE_CHANGE_POLICIES = ("stop", "refetch")


@dataclass(frozen=True)
class Workflow:
    name: str
    version: str
    steps: tuple[Step, ...]
    state_schema_version: int = 1
    # Raises core.errors.InvalidInput with a reason when a run's input is not acceptable.
    validate_input: Callable[[State], None] | None = None
    description: str = ""
    # Validators and migrations per state-schema version (None: only state_schema_version exists).
    schemas: SchemaSet | None = None
    # Steps that act on an approval referenced by the state (state["approval"], state["request_digest"]):
    # resume verification checks that approval is approved, unexpired and for the same digest.
    approval_guarded_steps: frozenset[str] = frozenset()
    # For a guarded step that checks its approval again itself before it acts (the authoring API's
    # acts_on_approval): the step that asks for it, where the step goes back when the approval lapsed.
    approval_asked_at: dict[str, str] = field(default_factory=dict)
    # Limits per run, unless the run's input sets its own under "budgets".
    default_budgets: dict[str, float] = field(default_factory=dict)
    # What resume verification does when a retrieval document behind the run's snapshots was deleted
    # or has a newer source_version: "stop" (refuse with source_changed) or "refetch" (detach those
    # snapshots from the run, so its next search fetches the current versions).
    on_source_change: str = "stop"
    # Signals a run accepts (POST /api/v1/runs/{id}/signals/{name}) when they are not declared through
    # the authoring API: an external workflow's registration lists them.
    signals: frozenset[str] = frozenset()
    # Read-only views of a run's state by name (GET /api/v1/runs/{id}/queries/{name}): the authoring
    # API's @wf.query functions, each taking the stored state.
    queries: Mapping[str, Callable[[State], Any]] = field(default_factory=dict)
    _by_name: dict[str, Step] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.on_source_change not in SOURCE_CHANGE_POLICIES:
            raise WorkflowDefinitionError(
                f"workflow {self.name}: on_source_change must be one of {', '.join(SOURCE_CHANGE_POLICIES)}"
            )
        if self.schemas is not None and self.schemas.current != self.state_schema_version:
            raise WorkflowDefinitionError(
                f"workflow {self.name}: state_schema_version {self.state_schema_version} is not the newest "
                f"schema ({self.schemas.current})"
            )
        if not self.steps:
            raise WorkflowDefinitionError(f"workflow {self.name} has no steps")
        for step in self.steps:
            if step.name in self._by_name:
                raise WorkflowDefinitionError(f"workflow {self.name} has two steps named {step.name}")
            self._by_name[step.name] = step

    @property
    def first_step(self) -> str:
        return self.steps[0].name

    def step(self, name: str) -> Step | None:
        return self._by_name.get(name)


def _version_key(version: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def version_key(version: str) -> tuple[int, Version | str]:
    """How versions sort: PEP 440 order ("1.10" after "1.9"), names that are not versions first."""
    return _version_key(version)


class WorkflowSource(Protocol):
    """Workflows and tools not in code, looked up on every call (a tenant's external workflows)."""

    def workflow(self, name: str, version: str | None) -> Workflow | None: ...

    def tool(self, name: str) -> ToolContract | None: ...

    def names(self) -> list[str]:
        """The names it holds (for the bound tenant), for refusal messages."""
        ...


class WorkflowRegistry:
    def __init__(self) -> None:
        self._workflows: dict[tuple[str, str], Workflow] = {}
        self._tools: dict[str, ToolContract] = {}
        self._sources: list[WorkflowSource] = []
        self._outside: dict[str, str] = {}
        self._lock = threading.Lock()

    def register_outside(self, name: str, *, how: str) -> None:
        """Runs of workflow `name` are stepped by their own process, never by Keeper's workers (a
        LangGraph thread): the engine refuses to resume, fork or rewind them. `how` tells a person
        what to do instead."""
        self._outside[name] = how

    def outside(self, name: str) -> str | None:
        """What to do instead, if workflow `name` is driven from outside; else None."""
        return self._outside.get(name)

    def outside_names(self) -> list[str]:
        return sorted(self._outside)

    def refuse_outside(self, *, workflow_name: str, run_id: object, action: str) -> None:
        """Raise DrivenOutside when a run of `workflow_name` is driven from outside."""
        how = self._outside.get(workflow_name)
        if how is not None:
            raise DrivenOutside(
                f"run {run_id} cannot be {action} here: its own process drives its steps ({workflow_name}); {how}",
                details={"workflow_name": workflow_name},
            )

    def register_tool(self, contract: ToolContract) -> ToolContract:
        self._tools[contract.name] = contract
        return contract

    def unregister_tool(self, name: str) -> None:
        """Forget a tool declared in code (the test kit takes its fakes back)."""
        self._tools.pop(name, None)

    def tool(self, name: str) -> ToolContract | None:
        return self._tools.get(name) or next((t for s in self._sources if (t := s.tool(name))), None)

    def add_source(self, source: WorkflowSource) -> None:
        """Consulted after the workflows and tools registered in code, which always win."""
        self._sources.append(source)

    def _sourced(self, name: str, version: str | None) -> Workflow | None:
        # A name defined in code belongs to code (sources cannot take it), so an unknown version of
        # it is unknown without asking them.
        if any(n == name for n, _ in self._workflows):
            return None
        return next((w for s in self._sources if (w := s.workflow(name, version))), None)

    def register(self, workflow: Workflow) -> Workflow:
        with self._lock:
            key = (workflow.name, workflow.version)
            existing = self._workflows.get(key)
            if existing is not None and [s.name for s in existing.steps] != [s.name for s in workflow.steps]:
                raise WorkflowDefinitionError(
                    f"{workflow.name} version {workflow.version} is already registered with other steps"
                )
            self._workflows[key] = workflow
        return workflow

    def get(self, name: str, version: str | None = None) -> Workflow:
        """The given version, or the newest registered one."""
        if version is not None:
            workflow = self._workflows.get((name, version)) or self._sourced(name, version)
            if workflow is None:
                raise UnknownWorkflow(
                    f"workflow {name!r} version {version!r} is not registered in this process"
                )
            return workflow
        versions = [w for (n, _), w in self._workflows.items() if n == name]
        if not versions and (sourced := self._sourced(name, None)) is not None:
            return sourced
        if not versions:
            known = ", ".join(sorted({n for n, _ in self._workflows})) or "none"
            outside = sorted({n for source in self._sources for n in source.names()})
            also = f"; this tenant's outside workflows: {', '.join(outside)}" if outside else ""
            raise UnknownWorkflow(f"unknown workflow {name!r} (registered: {known}{also})")
        return max(versions, key=lambda w: _version_key(w.version))

    def names(self) -> list[str]:
        return sorted({n for n, _ in self._workflows})

    def versions(self, name: str) -> list[str]:
        """The versions of `name` registered in code in this process, newest first."""
        found = [w for (n, _), w in self._workflows.items() if n == name]
        return [w.version for w in sorted(found, key=lambda w: _version_key(w.version), reverse=True)]


registry = WorkflowRegistry()
