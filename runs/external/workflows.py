"""Registering a tenant's external workflow, and the registry source that serves it to the engine."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction

from core.errors import Conflict, InvalidInput
from core.models import Tenant
from core.tenancy import tenant_of_call
from runs.engine.registry import (
    State,
    Step,
    StepContext,
    StepResult,
    Suspend,
    ToolContract,
    Workflow,
    registry,
    version_key,
)
from runs.external.models import ExternalWorkflow
from runs.external.schemas import input_validator, schema_checked

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,199}$")
STEP = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,49}$")
MAX_STEPS = 100
MAX_TOOLS = 50
# Where an internal worker would end up if it ever ran such a step (it never leases these runs).
OUTSIDE_ONLY = "external_step"


class ExternalWorkflowExists(Conflict):
    code = "workflow_version_exists"


@dataclass(frozen=True)
class Registered:
    workflow: ExternalWorkflow
    created: bool


def _text(value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidInput(
            f"{what} must match {pattern.pattern}, not {value!r}", code=f"invalid_{what.split()[0]}"
        )
    return value


def _tools(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise InvalidInput(
            f"tools must be a list of at most {MAX_TOOLS} {{name, version}}", code="invalid_tools"
        )
    tools: list[dict[str, str]] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "version"}:
            raise InvalidInput("each tool is an object with exactly name and version", code="invalid_tools")
        name = _text(item["name"], NAME, "tool name")
        version = _text(item["version"], VERSION, "tool version")
        known = registry.tool(name)
        if known is not None and known.version != version:
            raise InvalidInput(
                f"tool {name} is Keeper's own with contract version {known.version}, not {version}",
                code="invalid_tools",
            )
        tools.append({"name": name, "version": version})
    if len({t["name"] for t in tools}) != len(tools):
        raise InvalidInput("a tool is declared twice", code="invalid_tools")
    return tools


@tenant_of_call
def external_workflow_register(
    *,
    tenant: Tenant,
    name: str,
    version: str,
    steps: list[str],
    actor: str,
    tools: list[dict[str, str]] | None = None,
    input_schema: dict[str, Any] | None = None,
    approval_guarded_steps: list[str] | None = None,
    description: str = "",
    signals: list[str] | None = None,
) -> Registered:
    """Register (name, version) for the tenant; the same definition again returns the first one.

    A name Keeper's code already has is refused, and so is another definition of a registered version.
    """
    _text(name, NAME, "name")
    _text(version, VERSION, "version")
    if name in registry.names() or registry.outside(name) is not None:
        raise InvalidInput(
            f"workflow {name!r} is one of Keeper's own; choose another name", code="invalid_name"
        )
    if not isinstance(steps, list) or not 0 < len(steps) <= MAX_STEPS:
        raise InvalidInput(f"steps must be a list of 1 to {MAX_STEPS} step names", code="invalid_steps")
    for step in steps:
        _text(step, STEP, "steps entry")
    if len(set(steps)) != len(steps):
        raise InvalidInput("two steps have the same name", code="invalid_steps")
    guarded = list(approval_guarded_steps or [])
    if any(s not in steps for s in guarded):
        raise InvalidInput("approval_guarded_steps must name steps of this workflow", code="invalid_steps")
    if not isinstance(signals or [], list) or len(signals or []) > MAX_STEPS:
        raise InvalidInput(f"signals must be a list of at most {MAX_STEPS} names", code="invalid_signals")
    for signal in signals or []:
        _text(signal, STEP, "signals entry")
    definition = {
        "signals": sorted(set(signals or [])),
        "steps": steps,
        "tools": _tools(tools or []),
        "input_schema": schema_checked(input_schema),
        "approval_guarded_steps": guarded,
        "description": description.strip()[:2000],
    }
    with transaction.atomic():
        # One registration of a name at a time: the same version may be spelt otherwise ("1.0", "v1").
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"external-workflow:{tenant.tenant_id}:{name}"],
            )
        existing = _same_version(tenant, name, version)
        if existing is None:
            try:
                with transaction.atomic():
                    created = ExternalWorkflow.objects.create(
                        tenant=tenant, name=name, version=version, created_by=actor, **definition
                    )
                created.refresh_from_db()  # answered as stored (1e20 comes back from jsonb as digits)
                return Registered(created, True)
            except IntegrityError:  # registered concurrently elsewhere: compare with that one
                existing = ExternalWorkflow.objects.get(tenant=tenant, name=name, version=version)
    if any(not _same_json(getattr(existing, k), v) for k, v in definition.items()):
        spelt = (
            "" if existing.version == version else f" (as {existing.version!r}: the same version in PEP 440)"
        )
        raise ExternalWorkflowExists(
            f"{name} version {version} is already registered{spelt} with another definition; "
            "register a new version",
            details={"name": name, "version": existing.version, "steps": existing.steps},
        )
    return Registered(existing, False)


def _same_json(stored: Any, given: Any) -> bool:
    """Whether a stored JSON value is the one given, numbers by value: jsonb keeps a number's value,
    not its spelling (1e308 comes back as 1 and 308 zeros): the same definition registered again must
    not be a 409."""
    if isinstance(stored, dict) and isinstance(given, dict):
        return stored.keys() == given.keys() and all(_same_json(stored[k], given[k]) for k in stored)
    if isinstance(stored, list) and isinstance(given, list):
        return len(stored) == len(given) and all(_same_json(a, b) for a, b in zip(stored, given, strict=True))
    numbers = (int, float)
    if (
        isinstance(stored, numbers)
        and isinstance(given, numbers)
        and not isinstance(stored, bool)
        and not isinstance(given, bool)
    ):
        return _decimal(stored) == _decimal(given)
    return type(stored) is type(given) and stored == given


def _decimal(number: float) -> Decimal:
    return Decimal(repr(number)) if isinstance(number, float) else Decimal(number)


def _same_version(tenant: Tenant, name: str, version: str) -> ExternalWorkflow | None:
    """The registered version equal to `version`: the same text, or the same PEP 440 version spelt
    otherwise, so "1.00" with other steps cannot be registered beside "1" and taken by new runs."""
    return _version_of(ExternalWorkflow.objects.filter(tenant=tenant, name=name), version)


def _version_of(rows: Any, version: str) -> ExternalWorkflow | None:
    """Of these registrations, the one of `version`: its text, else the first spelt otherwise."""
    exact = rows.filter(version=version).order_by("id").first()
    key = version_key(version)
    return exact or next((row for row in rows.order_by("id") if version_key(row.version) == key), None)


def _outside_only(ctx: StepContext, state: State) -> StepResult:
    """Never called: Keeper's workers do not lease external runs. If one ever did, it stops here."""
    return Suspend(state, OUTSIDE_ONLY, f"step {ctx.step!r} of {ctx.workflow.name} runs in an outside worker")


def external_workflow_build(row: ExternalWorkflow) -> Workflow:
    return Workflow(
        name=row.name,
        version=row.version,
        steps=tuple(Step(name, _outside_only) for name in row.steps),
        validate_input=input_validator(row.input_schema) if row.input_schema is not None else None,
        description=row.description,
        approval_guarded_steps=frozenset(row.approval_guarded_steps),
        signals=frozenset(row.signals),
    )


def external_workflow_find(*, name: str, version: str | None = None) -> ExternalWorkflow | None:
    """The tenant's (row-level security) registration: the given version, or the newest by version
    (PEP 440 order, as for workflows in code: not the last registered, or registering "1.5" after "2"
    would move new runs back to 1.5)."""
    rows = ExternalWorkflow.objects.filter(name=name)
    if version is not None:
        # The same version spelt otherwise ("2.0" for "2") names it too, as registration says: a
        # start naming "2.0" is not an unknown workflow.
        return _version_of(rows, version)
    return max(rows, key=lambda row: (version_key(row.version), row.id), default=None)


class ExternalSource:
    """The registry's view of the bound tenant's external workflows and their declared tools."""

    def workflow(self, name: str, version: str | None) -> Workflow | None:
        row = external_workflow_find(name=name, version=version)
        return external_workflow_build(row) if row is not None else None

    def tool(self, name: str) -> ToolContract | None:
        # Declared tools have no lookup Keeper can call: an operation in doubt goes to a person (or
        # the worker reports its outcome) rather than being guessed.
        for tools in ExternalWorkflow.objects.filter(tools__contains=[{"name": name}]).values_list(
            "tools", flat=True
        ):
            for tool in tools:
                if tool["name"] == name:
                    return ToolContract(name=name, version=tool["version"])
        return None

    def names(self) -> list[str]:
        return sorted(set(ExternalWorkflow.objects.values_list("name", flat=True)))


def external_workflows_ready() -> None:
    """Called once per process (RunsConfig.ready): the registry source."""
    registry.add_source(ExternalSource())
