"""Merging a branch back: a fork's workspace (and state, by the workflow's rule) merged into its parent
or another run of the same tree, three-way against their common fork point (runs.engine.merge_plan).

A clean merge is one `workspace_merged` event on the target and a snapshot of its new files at that
seq, in one transaction. A merge with conflicts records them (`workspace_merge_conflicted`; a running
target waits, suspended `merge_conflicts`) until a person (the console, the API) or the workflow's
resolver picks a side or writes the text for each; then it applies the same way. Side effects are
never merged: operations stay with the run that made them, and nothing of the branch's operations is
copied, so a merge cannot send one again.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from core.artifacts import artifact_digests_in
from core.artifacts.services import artifacts_touch
from core.errors import Conflict, InvalidInput, NotFound
from core.tenancy import tenant_of_call, tenant_scope
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.forks import _state_at
from runs.engine.merge_plan import files_plan, files_resolved, picks_check, resolver_picks, state_plan
from runs.engine.merge_rules import MergePick
from runs.engine.selectors import run_get
from runs.engine.workspace import workspace_files_at
from runs.engine.workspace_models import MergeStatus, WorkspaceMerge, WorkspaceSnapshot
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import SubjectErased
from runs.kernel.models import AgentRun, RunStatus, ToolOperation
from runs.kernel.state import state_encode

MERGE_CONFLICTS_REASON = "merge_conflicts"


class MergeRefused(Conflict):
    code = "merge_refused"


class MergeRunBusy(Conflict):
    """A worker holds one of the two runs: it may keep files it has not saved yet."""

    code = "merge_run_busy"


class MergeTargetMoved(Conflict):
    """The target moved on since the merge read it: merge again."""

    code = "merge_target_moved"


class MergeNotOpen(Conflict):
    code = "merge_not_open"


def _lineage(run: AgentRun) -> list[tuple[UUID, int | None]]:
    """The run, then each run it was forked from with the seq it was forked at (None: the run itself,
    all of it)."""
    chain: list[tuple[UUID, int | None]] = [(run.run_id, None)]
    seen = {run.run_id}
    current = run
    while current.parent_run_id is not None and current.fork_seq is not None:
        parent = AgentRun.objects.filter(tenant_id=run.tenant_id, run_id=current.parent_run_id).first()
        if parent is None or parent.run_id in seen:
            break
        chain.append((parent.run_id, current.fork_seq))
        seen.add(parent.run_id)
        current = parent
    return chain


def merge_base(*, source: AgentRun, target: AgentRun) -> tuple[AgentRun, int]:
    """(the run, the seq) both sides share their history up to: the common fork point, or the source's
    seq a previous merge of it into this target took (as git merges from the last merge)."""
    previous = (
        WorkspaceMerge.objects.filter(
            tenant_id=target.tenant_id, source=source, target=target, status=MergeStatus.APPLIED
        )
        .order_by("-applied_at")
        .first()
    )
    if previous is not None and previous.source_seq is not None:
        return source, previous.source_seq
    theirs = _lineage(source)
    ours = dict(_lineage(target))
    for run_id, seq in theirs:
        if run_id in ours:
            other = ours[run_id]
            host = source if run_id == source.run_id else target if run_id == target.run_id else None
            host = host or AgentRun.objects.get(tenant_id=target.tenant_id, run_id=run_id)
            seqs = [s for s in (seq, other) if s is not None]
            return host, min(seqs) if seqs else host.state_revision
    raise InvalidInput(
        f"runs {source.run_id} and {target.run_id} are not forks of one tree: they share no fork point",
        code="merge_not_same_tree",
    )


def _leased(run: AgentRun) -> bool:
    return (
        run.lease_owner is not None
        and run.lease_expires_at is not None
        and run.lease_expires_at > timezone.now()
    )


def _refuse_unmergeable(source: AgentRun, target: AgentRun) -> None:
    if source.run_id == target.run_id:
        raise InvalidInput("a run cannot be merged into itself", code="merge_into_itself")
    for run in (source, target):
        if run.subject.startswith("erased:"):
            raise SubjectErased(f"run {run.run_id}'s subject was erased: it takes no merge")
        if run.imported:
            raise MergeRefused(f"run {run.run_id} is an imported history copy: it takes no merge")
        if _leased(run):
            raise MergeRunBusy(
                f"a worker holds run {run.run_id} and may hold files it has not saved yet: merge once its "
                "slice ends",
                details={"run_id": str(run.run_id)},
            )
    if target.workflow_name != source.workflow_name:
        raise InvalidInput("both runs must be of the same workflow", code="merge_not_same_tree")
    if WorkspaceMerge.objects.filter(
        tenant_id=target.tenant_id, target=target, status=MergeStatus.CONFLICTS
    ).exists():
        raise MergeRefused(
            f"run {target.run_id} already has a merge whose conflicts are open: resolve it first"
        )


def _payload(merge: WorkspaceMerge, **extra: Any) -> dict[str, Any]:
    return {
        "merge_id": str(merge.merge_id),
        "source_run_id": str(merge.source_id),
        "source_seq": merge.source_seq,
        "base": {"run_id": str(merge.base_run_id), "seq": merge.base_seq},
        "target_files_seq": merge.target_seq,
        **extra,
    }


def _apply_result(
    merge: WorkspaceMerge, *, manifest: dict[str, Any], taken: dict[str, str], actor: str, resolved_by: str
) -> int:
    """The workspace_merged event and the target's new snapshot, in the caller's transaction."""
    state = merge.state_taken.get("state")
    operations = ToolOperation.objects.filter(tenant_id=merge.tenant_id, run_id=merge.source_id).count()
    payload = _payload(
        merge,
        taken=taken,
        state={k: v for k, v in merge.state_taken.items() if k != "state"},
        resolved_by=resolved_by,
        operations_left_on_source=operations,
    )
    seq = apply(
        m.WorkspaceMerged(
            run_id=merge.target_id,
            tenant_id=merge.tenant_id,
            expected_revision=merge.target_revision,
            event_type="workspace_merged",
            payload=payload,
            actor=actor,
            state=None if state is None else state_encode(state),
            resume=True,
        )
    )
    if seq is None:
        raise MergeTargetMoved(
            f"run {merge.target_id} moved on (or a worker took it) since the merge read it: nothing was "
            "written; merge again"
        )
    artifacts_touch(tenant_id=merge.tenant_id, digests=artifact_digests_in(manifest))
    WorkspaceSnapshot.objects.create(
        tenant_id=merge.tenant_id,
        run_id=merge.target_id,
        seq=seq,
        reason="merge",
        manifest=manifest,
        changes=[],
    )
    merge.status, merge.result_seq, merge.applied_at = MergeStatus.APPLIED, seq, timezone.now()
    # The new snapshot names the result's blobs from now on; the merge keeps where each came from.
    merge.manifest, merge.sides, merge.conflicts, merge.taken = {}, {}, [], taken
    merge.resolved_by = resolved_by
    merge.state_taken = {k: v for k, v in merge.state_taken.items() if k != "state"}
    merge.save()
    run_enqueue_on_commit(run_id=merge.target_id)
    return seq


@tenant_of_call
def run_merge(*, run_id: UUID, into_run_id: UUID | None = None, actor: str) -> WorkspaceMerge:
    """Merge run `run_id` (a branch) into `into_run_id` (default: the run it was forked from)."""
    source = run_get(run_id=run_id)
    if into_run_id is None:
        if source.parent_run_id is None:
            raise InvalidInput(
                f"run {run_id} is not a fork: name the run to merge it into", code="merge_no_parent"
            )
        into_run_id = source.parent_run_id
    target = run_get(run_id=into_run_id)
    _refuse_unmergeable(source, target)
    base_run, base_seq = merge_base(source=source, target=target)
    with tenant_scope(target.tenant_id):
        _, base_files = workspace_files_at(run_id=base_run.run_id, seq=base_seq)
        target_seq, ours = workspace_files_at(run_id=target.run_id)
        source_seq_files, theirs = workspace_files_at(run_id=source.run_id)
        base_state, _, _ = _state_at(base_run, base_seq)
    state, state_taken = state_plan(
        workflow_name=target.workflow_name, base=base_state, ours=target.state, theirs=source.state
    )
    plan = files_plan(tenant_id=target.tenant_id, base=base_files, ours=ours, theirs=theirs)
    merge = WorkspaceMerge(
        merge_id=uuid.uuid4(),
        tenant_id=target.tenant_id,
        target=target,
        source=source,
        base_run_id=base_run.run_id,
        base_seq=base_seq,
        source_seq=source.state_revision if source_seq_files is not None else None,
        target_seq=target_seq,
        target_revision=target.state_revision,
        status=MergeStatus.CONFLICTS,
        conflicts=plan.conflicts,
        manifest=plan.manifest,
        sides=plan.sides,
        taken=plan.taken,
        state_taken={**state_taken, "state": state},
        actor=actor,
    )
    picks = resolver_picks(target.workflow_name, plan.conflicts)
    with tenant_scope(target.tenant_id), transaction.atomic():
        if not plan.conflicts or picks is not None:
            manifest = plan.manifest
            taken = dict(plan.taken)
            if picks is not None:
                manifest = files_resolved(
                    tenant_id=target.tenant_id,
                    plan_manifest=plan.manifest,
                    sides=plan.sides,
                    conflicts=plan.conflicts,
                    picks=picks,
                )
                taken.update({path: "resolved" for path in plan.sides})
            merge.save(force_insert=True)
            _apply_result(
                merge,
                manifest=manifest,
                taken=taken,
                actor=actor,
                resolved_by="" if picks is None else f"workflow:{target.workflow_name}",
            )
            return merge
        seq = apply(
            m.WorkspaceMerged(
                run_id=target.run_id,
                tenant_id=target.tenant_id,
                expected_revision=target.state_revision,
                event_type="workspace_merge_conflicted",
                payload=_payload(
                    merge, conflicts=[{"id": c["id"], "kind": c["kind"]} for c in plan.conflicts]
                ),
                actor=actor,
                wait=True,
                detail=f"{len(plan.conflicts)} merge conflict(s) of run {source.run_id} to resolve (merge {merge.merge_id})",
            )
        )
        if seq is None:
            raise MergeTargetMoved(
                f"run {target.run_id} moved on while merging: nothing was written; merge again"
            )
        merge.target_revision = seq
        artifacts_touch(tenant_id=target.tenant_id, digests=artifact_digests_in([plan.manifest, plan.sides]))
        merge.save(force_insert=True)
    return merge


def merge_get(*, merge_id: UUID) -> WorkspaceMerge:
    """A merge of the bound tenant (NotFound otherwise)."""
    merge = WorkspaceMerge.objects.select_related("target", "source").filter(merge_id=merge_id).first()
    if merge is None:
        raise NotFound(f"no merge {merge_id}", code="merge_not_found")
    return merge


@tenant_of_call
def merge_resolve(
    *, tenant_id: UUID, merge_id: UUID, picks: dict[str, MergePick], actor: str
) -> WorkspaceMerge:
    """Apply an open merge with a pick for each of its conflicts; its target moves on (a run that waited
    for them is asked to resume)."""
    with transaction.atomic():
        merge = (
            WorkspaceMerge.objects.select_for_update().filter(tenant_id=tenant_id, merge_id=merge_id).first()
        )
        if merge is None:
            raise NotFound(f"no merge {merge_id}", code="merge_not_found")
        if merge.status != MergeStatus.CONFLICTS:
            raise MergeNotOpen(f"merge {merge_id} is {merge.status}: it has no open conflicts")
        picks_check(list(merge.conflicts), picks)
        target = AgentRun.objects.get(tenant_id=tenant_id, run_id=merge.target_id)
        if target.state_revision != merge.target_revision or _leased(target):
            raise MergeTargetMoved(
                f"run {target.run_id} moved on since its conflicts were recorded: nothing was written; "
                "abandon this merge and merge again"
            )
        manifest = files_resolved(
            tenant_id=tenant_id,
            plan_manifest=dict(merge.manifest),
            sides=dict(merge.sides),
            conflicts=list(merge.conflicts),
            picks=picks,
        )
        taken = {**merge.taken, **{path: "resolved" for path in merge.sides}}
        _apply_result(merge, manifest=manifest, taken=taken, actor=actor, resolved_by=actor)
    return merge


@tenant_of_call
def merge_abandon(*, tenant_id: UUID, merge_id: UUID, actor: str) -> WorkspaceMerge:
    """Give up an open merge: nothing of the branch is taken; a target that waited for it resumes."""
    with transaction.atomic():
        merge = (
            WorkspaceMerge.objects.select_for_update().filter(tenant_id=tenant_id, merge_id=merge_id).first()
        )
        if merge is None:
            raise NotFound(f"no merge {merge_id}", code="merge_not_found")
        if merge.status != MergeStatus.CONFLICTS:
            raise MergeNotOpen(f"merge {merge_id} is {merge.status}: it has no open conflicts")
        target = AgentRun.objects.get(tenant_id=tenant_id, run_id=merge.target_id)
        seq = apply(
            m.WorkspaceMerged(
                run_id=target.run_id,
                tenant_id=tenant_id,
                expected_revision=target.state_revision,
                event_type="workspace_merge_abandoned",
                payload={"merge_id": str(merge.merge_id), "source_run_id": str(merge.source_id)},
                actor=actor,
                resume=target.status == RunStatus.SUSPENDED,
            )
        )
        if seq is None:
            raise MergeTargetMoved(f"run {target.run_id} is held by a worker: abandon again in a moment")
        merge.status, merge.resolved_by = MergeStatus.ABANDONED, actor
        merge.conflicts, merge.sides, merge.manifest = [], {}, {}
        merge.state_taken = {k: v for k, v in merge.state_taken.items() if k != "state"}
        merge.save()
        run_enqueue_on_commit(run_id=target.run_id)
    return merge
