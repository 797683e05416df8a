"""Side effects for authors: a declared tool (contract version, authoritative lookup) and what an
operation's call gets and returns; Context.operation runs the protocol with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runs.engine.registry import (
    ToolContract,
    ToolLookup,
    registry,
)

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
    # For a person reconciling an operation by hand (the support console): the external system's
    # records that may be this operation's (each shaped like a successful answer, so `external_ref`
    # reads its reference), and the address of its own page for them. Neither settles anything.
    records: Callable[[str], list[dict[str, Any]]] | None = None
    record_url: Callable[[str], str] | None = None
    # A stand-in's own answer to every call (the test kit's fake tools, runs.authoring.testing): given
    # the request and the OperationCall, in place of the step's `call`. Registered under the real
    # tool's name, it answers the lookups of both the step and resume verification too.
    answers: Callable[[Mapping[str, Any], OperationCall], Any] | None = None


def tool(
    name: str,
    *,
    version: str,
    lookup: Callable[[str], ToolLookup | None] | None,
    external_ref: Callable[[Any], str] | None = None,
    crash_label: str = "operation",
    call_timeout_s: float | Callable[[], float] | None = None,
    records: Callable[[str], list[dict[str, Any]]] | None = None,
    record_url: Callable[[str], str] | None = None,
) -> Tool:
    """Declare (and register, so resume verification can check and reconcile it) an external tool.

    A lookup that raises (the tool is down) counts as not authoritative: it proves nothing, and says
    why in `unavailable`. `records` and `record_url` (given an operation id) show a person reconciling
    by hand what the external system holds and where to see it."""
    declared = Tool(
        name=name,
        version=version,
        lookup=None if lookup is None else _never_raising(lookup),
        external_ref=external_ref or (lambda result: str(result["id"])),
        crash_label=crash_label,
        call_timeout_s=call_timeout_s,
        records=records,
        record_url=record_url,
    )
    registry.register_tool(declared)
    return declared


def tool_in_force(declared: Tool) -> Tool:
    """The tool a step's operation uses: the one it declared, or a stand-in registered under its name."""
    registered = registry.tool(declared.name)
    if isinstance(registered, Tool) and registered.answers is not None:
        return registered
    return declared


def _never_raising(lookup: Callable[[str], ToolLookup | None]) -> Callable[[str], ToolLookup | None]:
    def ask(operation_id: str) -> ToolLookup | None:
        try:
            return lookup(operation_id)
        except Exception as exc:  # an unreachable tool says nothing about whether the effect happened
            return ToolLookup(
                authoritative=False, applied=None, unavailable=f"{type(exc).__name__}: {exc}"[:300]
            )

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
