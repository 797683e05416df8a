"""Declaring a workflow for the authoring API: its steps in order, its state type, and the engine
Workflow it registers."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast, overload

from core.errors import InvalidInput
from runs.authoring._context import SIGNALS_KEY, AnyStep, Context, _Rewind, _Suspension
from runs.authoring.display import ApprovalDisplay, approval_display_make
from runs.engine.registry import (
    Next,
    State,
    Step,
    StepContext,
    StepResult,
    Suspend,
    Workflow,
    registry,
)
from runs.engine.state_migrations import SchemaSet
from runs.kernel.errors import WorkflowDefinitionError

S = TypeVar("S")
StepFunction = Callable[[Context, S], StepResult]

# Keys the engine keeps in every run's state; a typed state never sees them and cannot change them.
_ENGINE_KEYS = ("budgets", SIGNALS_KEY)

# The definitions registered in this process, by (name, version): what the signal and query API
# reads to know which signals a run's workflow accepts and which views of its state it declares.
_authored: dict[tuple[str, str], Definition[Any]] = {}


def authored(name: str, version: str) -> Definition[Any] | None:
    """The authoring definition of a registered workflow version (None: not declared with it)."""
    return _authored.get((name, version))


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
        signals: tuple[str, ...] = (),
        on_source_change: str = "stop",
    ):
        self.on_source_change = on_source_change
        self.name, self.version, self.state_type = name, version, state_type
        self._signals: set[str] = set()
        self._queries: dict[str, Callable[[S], Any]] = {}
        self._runners: dict[str, Callable[[State], Any]] = {}  # the registry's view of the queries
        self.description, self.validate_input, self.schemas = description, validate_input, schemas
        self.default_budgets = dict(default_budgets or {})
        self._steps: list[Step] = []
        self._names: dict[Callable[..., Any], str] = {}
        self._guarded: dict[str, AnyStep | str] = {}
        self._registered: Workflow | None = None
        self._displays: dict[str | None, ApprovalDisplay] = {}
        for signal in signals:
            self.signal(signal)

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

    def signal(self, name: str) -> str:
        """Declare a signal the workflow accepts (also `workflow(..., signals=(...))`)."""
        if self._registered is not None:
            raise WorkflowDefinitionError(f"workflow {self.name} is registered; declare signals before")
        if not isinstance(name, str) or not name.isidentifier():
            raise WorkflowDefinitionError(f"a signal name is an identifier, not {name!r}")
        self._signals.add(name)
        return name

    @property
    def signal_names(self) -> frozenset[str]:
        return frozenset(self._signals)

    def query(self, fn: Callable[[S], Any]) -> Callable[[S], Any]:
        """Declare a query: `@wf.query def progress(state) -> dict`, a read-only view of the state
        (GET /api/v1/runs/{id}/queries/progress). It must not change anything and returns JSON."""
        self._queries[fn.__name__] = fn
        self._runners[fn.__name__] = functools.partial(self.query_run, fn.__name__)
        return fn

    def query_names(self) -> frozenset[str]:
        return frozenset(self._queries)

    def query_run(self, name: str, state: State) -> Any:
        """The query's answer on a stored state (KeyError: no such query)."""
        return self._queries[name](self.load(state))

    def approval_display(
        self,
        *,
        title: str,
        fields: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
        amount: tuple[str, str] | None = None,
        approve_label: str = "Approve",
        reject_label: str = "Reject",
        step: AnyStep | str | None = None,
    ) -> ApprovalDisplay:
        """Declare how this workflow's approvals read in the support console (see
        runs/authoring/display.py): a title formatted with the request's fields, the fields
        that matter with their labels, the amount's (minor units, currency) keys, the buttons' words;
        `step` for the approvals of one step only. An undeclared approval is shown generically."""
        shown = approval_display_make(
            title=title, fields=fields, amount=amount, approve_label=approve_label, reject_label=reject_label
        )
        self._displays[None if step is None else self.name_of(step)] = shown
        return shown

    def approval_display_for(self, step: str) -> ApprovalDisplay | None:
        """How the approvals `step` asks for read (None: not declared, shown generically)."""
        return self._displays.get(step) or self._displays.get(None)

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
                    approval_asked_at={step: self.name_of(ask) for step, ask in self._guarded.items()},
                    default_budgets=self.default_budgets,
                    on_source_change=self.on_source_change,
                    signals=frozenset(self._signals),
                    queries=self._runners,
                )
            )
            _authored[(self.name, self.version)] = self
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
            # The replay check (runs.operator.replay) runs a step again on a recorded history with a
            # context of its own, which answers operations, approvals and signals from the record.
            replaying = getattr(base, "authoring_context", None)
            ctx = replaying(self, state) if replaying is not None else Context(base, self, state)
            try:
                result = function(ctx, self.load(state))
            except _Suspension as wait:
                return Suspend({**state, **wait.patch}, wait.reason, wait.detail, wake_at=wait.wake_at)
            except _Rewind as back:
                return Next({k: v for k, v in state.items() if k not in back.drop}, back.step)
            # What the engine keeps in the state goes on whatever the step returns (a typed state
            # drops it); what the step consumed counts only if the run moves on from this step.
            kept = {SIGNALS_KEY: state[SIGNALS_KEY]} if SIGNALS_KEY in state else {}
            again = isinstance(result, Suspend) and result.step in (None, ctx.step)
            extra = kept if again else {**kept, **ctx.engine_patch}
            if extra and isinstance(getattr(result, "state", None), dict):
                return dataclasses.replace(result, state={**result.state, **extra})
            return result

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
    signals: tuple[str, ...] = (),
    on_source_change: str = "stop",
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
    signals: tuple[str, ...] = (),
    on_source_change: str = "stop",
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
    signals: tuple[str, ...] = (),
    on_source_change: str = "stop",
) -> Definition[Any]:
    """Declare a workflow: name, version, the state's type (a dataclass or pydantic model; default a
    plain dict), input validation (raise core.errors.InvalidInput), and the state-schema versions
    with their migrations (`schemas`; the newest is the schema version new runs get), the signals a
    run accepts (`signals`, or `wf.signal(name)`), and what resume does when a retrieval source
    behind the run's snapshots changed (`on_source_change`: "stop" or "refetch")."""
    return Definition(
        name,
        version=version,
        state_type=state,
        description=description,
        validate_input=validate_input,
        schemas=schemas,
        default_budgets=default_budgets,
        signals=signals,
        on_source_change=on_source_change,
    )
