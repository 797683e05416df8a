"""A replay's steps: the overrides they run with, and the answers that stand in for side effects.

A replay is a fork marked `replay` (runs/evaluation/ starts them). The step driver runs each of its
steps inside replay_applied: the parts named in its overrides (the support model, the compactor, the
decider...) are built from the override, and the authoring helpers ask here instead of acting. An
operation is answered from the original run's record (the same operation id, the same request: its
recorded outcome) or refused; an approval from the original's decided approval of the same request,
or refused. A replay never sends anything, never waits for a person, never writes memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings

from core.backends import backends_overridden
from core.errors import ApplicationError
from runs.engine.operations import run_lineage
from runs.engine.replay_models import RunReplay
from runs.kernel.models import Approval, ApprovalStatus, OperationStatus, ToolOperation

logger = logging.getLogger(__name__)

# The suspend reason of a replay that reached what it may not do: a side effect the original never
# made (or made for another request), an approval nobody decided in the original.
REPLAY_REFUSED = "replay_refused"


class ReplayRefused(ApplicationError):
    code = REPLAY_REFUSED


@dataclass(frozen=True)
class ReplayScope:
    run_id: UUID
    tenant_id: UUID
    original_run_id: UUID
    at_seq: int
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def lineage(self) -> set[UUID]:
        return run_lineage(self.original_run_id)


_current: ContextVar[ReplayScope | None] = ContextVar("keeper_replay", default=None)


def replay_current() -> ReplayScope | None:
    """The replay whose step is running in this context, if any."""
    return _current.get()


@contextmanager
def replay_applied(*, run_id: UUID, tenant_id: UUID) -> Iterator[ReplayScope]:
    """Run a replay's step: its overrides in force and its side effects answered from the record."""
    row = RunReplay.objects.filter(run_id=run_id, tenant_id=tenant_id).first()
    if row is None:  # written with the fork, in its transaction: a replay without one is a broken copy
        raise ReplayRefused(f"run {run_id} is marked a replay but has no replay record")
    scope = ReplayScope(run_id, tenant_id, row.original_run_id, int(row.at_seq), row.overrides or {})
    token = _current.set(scope)
    try:
        with backends_overridden(_with_keys(scope.overrides.get("backends") or {})):
            yield scope
    finally:
        _current.reset(token)


def _with_keys(backends: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The stored specs with the API key the settings give their endpoint (stored overrides hold none)."""
    return {
        part: {**spec, "OPTIONS": {**spec["OPTIONS"], "api_key": endpoint_api_key(str(base_url))}}
        if (base_url := spec.get("OPTIONS", {}).get("base_url"))
        else spec
        for part, spec in backends.items()
    }


def endpoint_api_key(base_url: str) -> str:
    """The key the settings give this endpoint (for any part), or ""."""
    for spec in settings.BACKENDS.values():
        options = spec.get("OPTIONS", {}) if isinstance(spec, dict) else {}
        if str(options.get("base_url") or "").rstrip("/") == base_url.rstrip("/") and options.get("api_key"):
            return str(options["api_key"])
    return ""


def replay_operation_answer(scope: ReplayScope, *, operation_id: str, request_digest: str) -> ToolOperation:
    """The original's settled operation under this id for this very request, or ReplayRefused."""
    recorded = ToolOperation.objects.filter(
        tenant_id=scope.tenant_id, operation_id=operation_id, run_id__in=scope.lineage
    ).first()
    if recorded is None:
        raise ReplayRefused(
            f"operation {operation_id} was never made by the original run {scope.original_run_id}: "
            "a replay does not send side effects"
        )
    if recorded.request_digest != request_digest:
        raise ReplayRefused(
            f"the original made operation {operation_id} with another request: its outcome does not "
            "answer this one, and a replay does not send side effects"
        )
    if recorded.status not in (OperationStatus.SUCCEEDED, OperationStatus.FAILED):
        raise ReplayRefused(
            f"operation {operation_id} of the original run is {recorded.status}, not settled: "
            "there is no recorded outcome to answer with"
        )
    return recorded


def replay_approval_answer(scope: ReplayScope, *, request_digest: str) -> Approval:
    """The original's decided approval of this very request, or ReplayRefused (a replay waits for no one)."""
    decided = (
        Approval.objects.filter(
            tenant_id=scope.tenant_id,
            run_id__in=scope.lineage,
            request_digest=request_digest,
            status__in=(ApprovalStatus.APPROVED, ApprovalStatus.REJECTED),
        )
        .order_by("-decided_at")
        .first()
    )
    if decided is not None:
        return decided
    pending = Approval.objects.filter(
        tenant_id=scope.tenant_id, run_id__in=scope.lineage, request_digest=request_digest
    ).exists()
    why = "is still undecided" if pending else "was never asked for"
    raise ReplayRefused(
        f"the original run's approval of this request {why}: a replay waits for no person",
        details={"request_digest": request_digest},
    )


def replay_canned(scope: ReplayScope, *, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The override's canned answer for this call of `tool`: the first whose arguments all match
    (an empty `arguments` matches every call), or None."""
    for canned in (scope.overrides.get("tools") or {}).get(tool) or ():
        wanted = canned.get("arguments") or {}
        if all(arguments.get(k) == v for k, v in wanted.items()):
            result = canned.get("result")
            return dict(result) if isinstance(result, dict) else {"result": result}
    return None


# What happens after a replay's slice ends suspended (the evaluation feeds it the original's next
# message); registered by runs' AppConfig.ready, as fork copiers are.
_after_suspend: list[Callable[[UUID], object]] = []


def replay_after_suspend_register(hook: Callable[[UUID], object]) -> None:
    if hook not in _after_suspend:
        _after_suspend.append(hook)


def replay_suspended(run_id: UUID) -> None:
    """A replay's slice ended suspended. A hook that cannot act (the run was cancelled or erased
    meanwhile) leaves the replay as it is: it is settled, and its comparison says where it stopped."""
    for hook in _after_suspend:
        try:
            hook(run_id)
        except ApplicationError as exc:
            logger.info("replay %s not fed: %s", run_id, exc.code)
