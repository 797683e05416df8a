"""A run's workspace: files a step reads and writes through ctx.workspace, stored content-addressed and
snapshotted by policy (every N steps, on suspend, before a side effect), restored on resume and take-over.

A step's writes are pending until its step commits; committed writes are kept in the worker's memory,
step by step, until the next snapshot, which stores each version's bytes in the artifact store
(core.artifacts: by digest, once per content and tenant) and writes a row in workspace_snapshots at the
seq of the last committed event: the manifest (path -> digest, size) and what each step since the
previous snapshot changed. A crash loses what was written after the last snapshot, as chapter 39
accepts; N is chosen by weighing a snapshot's cost against the work a crash makes redo
(workspace_snapshot_interval). The files at any seq a snapshot covers are exact: the snapshot at or
before it plus the next snapshot's steps up to it. A fork's first snapshot is those files at the fork
point (no byte is copied); a TTL sweep deletes the snapshots of finished runs (the blobs go with
core.artifacts' sweep once nothing refers to them); erasure deletes a subject's runs' snapshots and
the blobs only they name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.artifacts import (
    ReferencePlace,
    artifact_digests_in,
    artifact_get,
    artifact_put_many,
    artifact_references_register,
)
from core.artifacts.local import LocalArtifactStore
from core.artifacts.reclaim import artifacts_erase
from core.artifacts.services import artifacts_touch
from core.errors import ApplicationError, Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_bind, tenant_scope
from runs.engine.workspace_models import WorkspaceMerge, WorkspaceSnapshot
from runs.kernel.models import AgentRun, RunStatus

logger = logging.getLogger(__name__)

MAX_PATH_CHARS = 512
MAX_FILE_BYTES = 16 * 1024 * 1024
# Measured by `manage.py workspace_bench` (see the README), on the shared 2-core test machine: a small
# workspace (20 files of 4 KiB, 1 changed) costs 0.7-1.8 ms a snapshot (blobs + manifest, then the
# manifest row); a model-calling step costs ~2 s; one crash per ~1,000 steps. That gives N = 1 (snapshot
# every step); a big workspace (200 x 64 KiB, 20 changed: ~18 ms) gives N = 4. Set
# KEEPER_WORKSPACE_SNAPSHOT_STEPS (a fixed N) when a deployment's figures differ.
DEFAULT_SNAPSHOT_COST_S = 0.0007
DEFAULT_STEP_COST_S = 2.0
DEFAULT_FAILURE_RATE = 0.001
MAX_INTERVAL = 1000


def workspace_snapshot_interval(*, snapshot_cost_s: float, step_cost_s: float, failure_rate: float) -> int:
    """The number of steps between snapshots that costs least per step.

    Chapter 39's model: a crash falls uniformly inside an interval, so it loses on average half of it
    (N/2 steps of work to redo). Per step that is failure_rate * N/2 * step_cost_s of expected redo,
    against snapshot_cost_s / N of snapshot writes; the sum is least at N = sqrt(2C / (p * s))
    (Young's interval), rounded to the better neighbouring whole number, between 1 and MAX_INTERVAL.
    """
    if snapshot_cost_s < 0 or step_cost_s < 0 or not 0 <= failure_rate <= 1:
        raise InvalidInput(
            "costs must be non-negative and the failure rate between 0 and 1", code="invalid_interval_input"
        )
    if failure_rate == 0 or step_cost_s == 0:
        return MAX_INTERVAL  # nothing to redo: snapshot only on suspend, side effects and slice ends
    best = math.sqrt(2 * snapshot_cost_s / (failure_rate * step_cost_s))

    def overhead(n: int) -> float:
        return snapshot_cost_s / n + failure_rate * step_cost_s * n / 2

    candidates = {max(1, math.floor(best)), max(1, math.ceil(best))}
    return min(MAX_INTERVAL, min(candidates, key=lambda n: (overhead(n), n)))


def workspace_interval() -> int:
    """N in force: KEEPER_WORKSPACE_SNAPSHOT_STEPS if set (settings or environment), else computed."""
    fixed = settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS
    if fixed:
        return max(1, int(fixed))
    return workspace_snapshot_interval(
        snapshot_cost_s=DEFAULT_SNAPSHOT_COST_S,
        step_cost_s=DEFAULT_STEP_COST_S,
        failure_rate=DEFAULT_FAILURE_RATE,
    )


def workspace_path_clean(path: str) -> str:
    """A relative POSIX path with no '..', no empty or absolute parts; InvalidInput otherwise."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise InvalidInput(f"a workspace path must be 1..{MAX_PATH_CHARS} characters", code="invalid_path")
    clean = posixpath.normpath(path)
    if path.startswith("/") or clean.startswith("..") or clean in (".", ""):
        raise InvalidInput(f"workspace path {path!r} must stay inside the workspace", code="invalid_path")
    return clean


@dataclass
class Workspace:
    """One run's files in this worker: the last snapshot's manifest, committed and pending changes."""

    run_id: UUID
    tenant_id: UUID
    base: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_seq: int | None = None
    committed: dict[str, bytes | None] = field(default_factory=dict)
    # The same changes, step by step (seq, files): a snapshot keeps them, so the files at any seq it
    # covers can be rebuilt exactly.
    steps: list[tuple[int, dict[str, bytes | None]]] = field(default_factory=list)
    pending: dict[str, bytes | None] = field(default_factory=dict)
    last_seq: int | None = None
    steps_since: int = 0

    def _current(self, path: str) -> bytes | dict[str, Any] | None:
        for layer in (self.pending, self.committed):
            if path in layer:
                return layer[path]
        return self.base.get(path)

    def read(self, path: str) -> bytes:
        """The file's bytes as this step sees them (NotFound if there is none)."""
        found = self._current(workspace_path_clean(path))
        if found is None:
            raise NotFound(
                f"no file {path!r} in the workspace of run {self.run_id}", code="workspace_file_missing"
            )
        return found if isinstance(found, bytes) else artifact_get(tenant_id=self.tenant_id, ref=found)

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8")

    def exists(self, path: str) -> bool:
        return self._current(workspace_path_clean(path)) is not None

    def write(self, path: str, data: bytes | str) -> None:
        """Write the file; it counts once this step commits (a failed attempt's writes are dropped)."""
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if len(body) > MAX_FILE_BYTES:
            raise InvalidInput(
                f"workspace file {path!r} is over {MAX_FILE_BYTES} bytes", code="file_too_large"
            )
        self.pending[workspace_path_clean(path)] = body

    def delete(self, path: str) -> None:
        self.pending[workspace_path_clean(path)] = None

    def list(self) -> list[str]:
        """Every path there is now, sorted."""
        paths = set(self.base) | set(self.committed) | set(self.pending)
        return sorted(p for p in paths if self._current(p) is not None)

    @property
    def dirty(self) -> bool:
        return bool(self.steps)


_open: dict[UUID, Workspace] = {}


def _latest(run_id: UUID, at_most: int | None = None) -> WorkspaceSnapshot | None:
    rows = WorkspaceSnapshot.objects.filter(run_id=run_id)
    if at_most is not None:
        rows = rows.filter(seq__lte=at_most)
    return rows.order_by("-seq").first()


def workspace_of(*, run_id: UUID, tenant_id: UUID) -> Workspace:
    """The run's workspace in this worker, loaded from its last snapshot on first use in a slice."""
    ws = _open.get(run_id)
    if ws is None:
        with tenant_scope(tenant_id):
            snap = _latest(run_id)
        ws = Workspace(run_id=run_id, tenant_id=tenant_id)
        if snap is not None:
            ws.base, ws.base_seq, ws.last_seq = dict(snap.manifest), snap.seq, snap.seq
        _open[run_id] = ws
    return ws


def _replay(
    files: dict[str, Any], changes: list[dict[str, Any]], *, after: int | None, upto: int
) -> int | None:
    """Apply the steps of `changes` in (after, upto] to `files`; the last seq applied, if any."""
    applied = None
    for change in changes:
        seq = int(change["seq"])
        if (after is None or seq > after) and seq <= upto:
            for path, ref in change["files"].items():
                if ref is None:
                    files.pop(path, None)
                else:
                    files[path] = ref
            applied = seq
    return applied


def _snapshot(ws: Workspace, reason: str) -> WorkspaceSnapshot | None:
    """Store each committed version's bytes and write the manifest and the steps at the last committed seq."""
    if not ws.dirty or ws.last_seq is None:
        return None
    bodies = [body for _, files in ws.steps for body in files.values() if body is not None]
    refs = iter(artifact_put_many(tenant_id=ws.tenant_id, blobs=bodies, kind="workspace"))
    changes = [
        {"seq": seq, "files": {path: None if body is None else next(refs) for path, body in files.items()}}
        for seq, files in ws.steps
    ]
    manifest = dict(ws.base)
    _replay(manifest, changes, after=None, upto=ws.last_seq)
    with tenant_scope(ws.tenant_id):
        snap, _ = WorkspaceSnapshot.objects.update_or_create(
            run_id=ws.run_id,
            seq=ws.last_seq,
            defaults={"tenant_id": ws.tenant_id, "reason": reason, "manifest": manifest, "changes": changes},
        )
    ws.base, ws.base_seq, ws.committed, ws.steps, ws.steps_since = manifest, ws.last_seq, {}, [], 0
    return snap


# --- the executor's hooks (runs/engine/steps.py) ---


def workspace_slice_begin(*, run_id: UUID) -> None:
    """A new lease: whatever this worker held of the run may be stale; the next use reloads."""
    _open.pop(run_id, None)


def workspace_step_begin(*, run_id: UUID) -> None:
    """A step attempt starts: an earlier failed attempt's writes do not count."""
    ws = _open.get(run_id)
    if ws is not None:
        ws.pending.clear()


def workspace_step_end(*, run_id: UUID, result: Any) -> None:
    """The step's AdvanceResult: committed at `result.seq`, or not (then the step's writes are
    dropped). Snapshot every N steps, when the run stops running (suspended, finished), and at a
    slice's end (`result.carry` is None: the lease is given back)."""
    ws = _open.get(run_id)
    if ws is None:
        return
    seq, status, final = result.seq, result.status, result.carry is None
    if (
        result.outcome != "committed"
        or seq is None
        or status not in ("running", "suspended", "completed", "failed")
    ):
        ws.pending.clear()  # a step error's retry, a fence: this attempt's writes do not count
        return
    if ws.pending:
        ws.steps.append((seq, dict(ws.pending)))
    ws.committed.update(ws.pending)
    ws.pending.clear()
    ws.last_seq, ws.steps_since = seq, ws.steps_since + 1
    if status == "suspended":
        _snapshot(ws, "suspend")
    elif status != "running":
        _snapshot(ws, "finished")
    elif ws.steps_since >= workspace_interval():
        _snapshot(ws, "interval")
    elif final:
        _snapshot(ws, "slice_end")


def workspace_slice_end(*, run_id: UUID) -> None:
    """The lease is given back (or the slice raised): keep what was committed, drop the copy."""
    ws = _open.pop(run_id, None)
    if ws is not None:
        ws.pending.clear()
        try:
            _snapshot(ws, "slice_end")
        except Exception:  # in the executor's `finally`: never hide the error the slice raised
            logger.exception("run %s: the slice-end workspace snapshot failed; its writes are lost", run_id)


def workspace_before_side_effect(*, run_id: UUID) -> None:
    """Before an operation is sent: what earlier steps committed is made durable first."""
    ws = _open.get(run_id)
    if ws is not None:
        _snapshot(ws, "side_effect")


# --- reading (the console) ---


def workspace_snapshots(*, run_id: UUID) -> list[WorkspaceSnapshot]:
    """The run's snapshots, oldest first (the caller's tenant scope applies)."""
    return list(WorkspaceSnapshot.objects.filter(run_id=run_id).order_by("seq"))


def workspace_files_at(
    *, run_id: UUID, seq: int | None = None
) -> tuple[int | None, dict[str, dict[str, Any]]]:
    """(the seq the files are of, the files) right after event `seq` (None: the last snapshot).

    The last snapshot at or before `seq`, plus what the next snapshot's steps up to `seq` changed: the
    files exactly as that event left them. Past the last snapshot nothing more is saved (a running
    run's newer writes, or a crashed worker's lost ones): the last snapshot's files, and its seq.
    """
    snap = _latest(run_id, seq)
    files = {} if snap is None else dict(snap.manifest)
    at = None if snap is None else snap.seq
    if seq is not None:
        later = WorkspaceSnapshot.objects.filter(run_id=run_id, seq__gt=seq).order_by("seq").first()
        if later is not None:
            _replay(files, list(later.changes), after=at, upto=seq)
            at = seq
    return at, files


def workspace_file_text(*, tenant_id: UUID, ref: dict[str, Any], limit: int = 200_000) -> str:
    """A stored file as text for display (bytes that are not UTF-8 are shown replaced)."""
    try:
        data = artifact_get(tenant_id=tenant_id, ref=ref)
    except ApplicationError as exc:
        return f"[{exc.message}]"
    return data[:limit].decode("utf-8", errors="replace")


# --- forks ---


class WorkspaceNotSaved(Conflict):
    code = "workspace_not_saved"


def workspace_fork_copy(
    *, parent: AgentRun, child_id: uuid.UUID, at_seq: int, next_step: str, state_digest: str
) -> int:
    """A fork's first snapshot is the parent's files exactly at the fork point: no bytes copied.

    A worker in the middle of a slice of the parent may hold writes of steps after the last snapshot
    that are saved only at the next one (every N steps, at the latest when the slice ends): a fork
    there is refused for a moment rather than given older files than its state. Once no worker holds
    the parent, every committed write was saved (or lost with a crashed worker, as the take-over's).
    """
    seq, files = workspace_files_at(run_id=parent.run_id, seq=at_seq)
    leased = parent.lease_expires_at is not None and parent.lease_expires_at > timezone.now()
    if seq is not None and seq < at_seq and parent.status == RunStatus.RUNNING and leased:
        raise WorkspaceNotSaved(
            f"run {parent.run_id} is in the middle of a slice and its workspace is saved up to event {seq}: "
            f"fork at {seq} or earlier, or at {at_seq} again once the slice ends",
            details={"saved_seq": seq},
        )
    if seq is not None:
        # Touched in the fork's transaction: the sweep leaves these blobs alone while the copy commits.
        artifacts_touch(tenant_id=parent.tenant_id, digests=artifact_digests_in(files))
        WorkspaceSnapshot.objects.create(
            tenant_id=parent.tenant_id, run_id=child_id, seq=1, reason="fork", manifest=files, changes=[]
        )
    return 0


# --- the TTL sweep ---


def workspace_reclaim(*, limit: int = 1000) -> dict[str, int]:
    """Delete the snapshots of runs finished more than KEEPER_WORKSPACE_TTL seconds ago. Their blobs
    stay until core.artifacts' sweep finds that nothing (another snapshot, a tool result, a state)
    refers to them any more."""
    ttl = float(settings.KEEPER_WORKSPACE_TTL)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, tenant_id FROM keeper_workspace_reclaimable(%s, %s)", [ttl, limit])
        rows = cursor.fetchall()
    by_tenant: dict[UUID, list[int]] = {}
    for snap_id, tenant_id in rows:
        by_tenant.setdefault(tenant_id, []).append(snap_id)
    deleted = 0
    for tenant_id, ids in by_tenant.items():
        with tenant_bind(tenant_id), tenant_scope(tenant_id):
            deleted += WorkspaceSnapshot.objects.filter(tenant_id=tenant_id, id__in=ids).delete()[0]
    return {"snapshots": deleted}


# --- what refers to stored blobs, and what erasure asks of the workspace ---

# Every digest a tenant's snapshots name, in their manifests and in their steps (a fork replays those).
REFERENCES_SQL = """
    SELECT f.value ->> 'digest' FROM workspace_snapshots s CROSS JOIN LATERAL jsonb_each(s.manifest) f
     WHERE s.tenant_id = %(tenant)s AND NOT (s.run_id = ANY(%(except_runs)s::uuid[]))
       AND jsonb_typeof(f.value) = 'object'
    UNION ALL
    SELECT f.value ->> 'digest' FROM workspace_snapshots s
           CROSS JOIN LATERAL jsonb_array_elements(s.changes) c
           CROSS JOIN LATERAL jsonb_each(c.value -> 'files') f
     WHERE s.tenant_id = %(tenant)s AND NOT (s.run_id = ANY(%(except_runs)s::uuid[]))
       AND jsonb_typeof(s.changes) = 'array' AND jsonb_typeof(c.value -> 'files') = 'object'
       AND jsonb_typeof(f.value) = 'object'
"""


# Every digest a tenant's merges still name: an open merge's files, settled and conflicting.
MERGE_REFERENCES_SQL = """
    SELECT f.value ->> 'digest' FROM workspace_merges g CROSS JOIN LATERAL jsonb_each(g.manifest) f
     WHERE g.tenant_id = %(tenant)s
       AND NOT (g.target_run_id = ANY(%(except_runs)s::uuid[]) OR g.source_run_id = ANY(%(except_runs)s::uuid[]))
       AND jsonb_typeof(g.manifest) = 'object' AND jsonb_typeof(f.value) = 'object'
    UNION ALL
    SELECT s.value ->> 'digest' FROM workspace_merges g CROSS JOIN LATERAL jsonb_each(g.sides) f
           CROSS JOIN LATERAL jsonb_each(f.value) s
     WHERE g.tenant_id = %(tenant)s
       AND NOT (g.target_run_id = ANY(%(except_runs)s::uuid[]) OR g.source_run_id = ANY(%(except_runs)s::uuid[]))
       AND jsonb_typeof(g.sides) = 'object' AND jsonb_typeof(f.value) = 'object'
       AND jsonb_typeof(s.value) = 'object'
"""


def _merges_of(run_ids: list[UUID]) -> Any:
    return WorkspaceMerge.objects.filter(Q(target_id__in=run_ids) | Q(source_id__in=run_ids))


def _snapshot_digests(run_ids: list[UUID]) -> list[str]:
    snapshots = WorkspaceSnapshot.objects.filter(run_id__in=run_ids).values_list("manifest", "changes")
    merges = _merges_of(run_ids).values_list("manifest", "sides")
    return [d for first, second in [*snapshots, *merges] for d in artifact_digests_in([first, second])]


def workspace_digests_of(*, tenant_id: UUID, run_ids: list[UUID]) -> set[str]:
    """Every blob digest these runs' snapshots and merges name (for erasure: erasure/erasers/workspace.py)."""
    with tenant_scope(tenant_id):
        return set(_snapshot_digests(run_ids))


def workspace_forget(*, tenant_id: UUID, run_ids: list[UUID], digests: set[str]) -> dict[str, int]:
    """Delete these runs' snapshots and the merges they took part in, then the blobs of `digests` (and theirs) nothing else refers to."""
    with tenant_scope(tenant_id):
        digests = digests | set(_snapshot_digests(run_ids))
        manifests, _ = WorkspaceSnapshot.objects.filter(tenant_id=tenant_id, run_id__in=run_ids).delete()
        merges, _ = _merges_of(run_ids).filter(tenant_id=tenant_id).delete()
    blobs = artifacts_erase(tenant_id=tenant_id, digests=tuple(sorted(digests)), except_runs=tuple(run_ids))
    return {"manifests": manifests, "merges": merges, "blobs": blobs}


def register() -> None:
    """Called from RunsConfig.ready: the fork copier, and what refers to stored blobs."""
    from runs.engine.forks import fork_copier_register

    fork_copier_register(workspace_fork_copy)
    artifact_references_register(
        ReferencePlace(kind="workspace", what="workspace snapshots' manifests and steps", sql=REFERENCES_SQL)
    )
    artifact_references_register(
        ReferencePlace(
            kind="workspace_merge",
            what="workspace merges' files (settled and in conflict)",
            sql=MERGE_REFERENCES_SQL,
        )
    )


def bench_snapshot(*, files: int, file_bytes: int, changed: int, rounds: int) -> dict[str, float]:
    """Time a snapshot's two parts, mean seconds each: storing the changed files (their records and
    bytes) plus the manifest (put_s), and writing the manifest row (db_s, into a temporary table shaped
    like workspace_snapshots, so no run is needed).

    Nothing is left behind: the bytes go to a temporary local store that is removed, and the records
    belong to a tenant made for the measurement inside a transaction that is rolled back.
    """
    with tempfile.TemporaryDirectory(prefix="keeper-workspace-bench-") as root, transaction.atomic():
        scratch = LocalArtifactStore(root=root)
        tenant = Tenant.objects.create(
            slug=f"workspace-bench-{uuid.uuid4().hex[:12]}", name="workspace bench"
        )

        def put(count: int) -> list[dict[str, Any]]:
            blobs = [os.urandom(file_bytes) for _ in range(count)]
            return artifact_put_many(tenant_id=tenant.tenant_id, blobs=blobs, kind="workspace", store=scratch)

        manifest = {f"notes/f{i}.md": ref for i, ref in enumerate(put(files))}
        started = time.perf_counter()
        for _ in range(rounds):
            for i, ref in enumerate(put(changed)):
                manifest[f"notes/f{i}.md"] = ref
            body = json.dumps(manifest)
        put_s = (time.perf_counter() - started) / rounds
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TEMPORARY TABLE IF NOT EXISTS workspace_bench "
                "(id bigserial PRIMARY KEY, seq bigint, reason text, manifest jsonb, created_at timestamptz)"
            )
            started = time.perf_counter()
            for seq in range(rounds):
                cursor.execute(
                    "INSERT INTO workspace_bench (seq, reason, manifest, created_at) VALUES (%s, 'bench', %s, now())",
                    [seq, body],
                )
            db_s = (time.perf_counter() - started) / rounds
            cursor.execute("DROP TABLE workspace_bench")
        transaction.set_rollback(True)
    return {"put_s": put_s, "db_s": db_s}
