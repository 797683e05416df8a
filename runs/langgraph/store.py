"""Every SQL statement of LangGraph threads: a checkpoint is one call that locks its run and stores it.

Each statement is one round trip that carries its tenant (core.db.wire) and also names the tenant in
its own predicate. What moves the thread's run (a checkpoint, an interrupt asked, the thread deleted)
is the kernel's move. No LangGraph import here: the saver (runs/langgraph/saver.py) serializes, this
module stores bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from core.db import wire
from core.digests import erased_id
from core.tenancy import tenant_bind
from runs.kernel import apply
from runs.kernel import moves as m

WORKFLOW = "langgraph"
# The suspend reason of a thread's run: LangGraph drives it from the graph's process; Keeper's
# workers never step it (the sweep and leases only take running runs or resume requests).
THREAD_REASON = "langgraph_thread"
# The latest checkpoint has a pending interrupt(): the thread waits for a person (the support inbox).
INTERRUPT_REASON = "langgraph_interrupt"
# A person answered the interrupt; the answer waits for the graph (a worker, or the caller's process).
ANSWERED_REASON = "langgraph_answered"
THREAD_REASONS = (THREAD_REASON, INTERRUPT_REASON, ANSWERED_REASON)
CHECKPOINT_EVENT = "langgraph_checkpoint"
INTERRUPT_EVENT = "langgraph_interrupt"
ANSWERED_EVENT = "langgraph_interrupt_answered"
INTERRUPT_CHANNEL = "__interrupt__"  # LangGraph's INTERRUPT channel (langgraph._internal._constants)


class ThreadConnections:
    """The Django connections a saver or store used, one per calling thread. LangGraph writes
    checkpoints from background threads it starts anew for each invoke: a connection is kept while its
    thread lives (its next call reuses it) and closed once the thread is gone, so a long-lived graph
    process holds one connection per live thread, not one per thread it ever saw. close() closes the
    rest; the calling thread's own connection is Django's to manage."""

    def __init__(self) -> None:
        self._used: dict[int, tuple[threading.Thread, BaseDatabaseWrapper]] = {}
        self._lock = threading.Lock()

    def use(self) -> None:
        """Note this thread's connection, and close those of threads that ended."""
        wrapper = connections[DEFAULT_DB_ALIAS]
        with self._lock:
            ended = [key for key, (thread, _) in self._used.items() if not thread.is_alive()]
            gone = [self._used.pop(key)[1] for key in ended]
            self._used.setdefault(id(wrapper), (threading.current_thread(), wrapper))
        _close(gone)

    def close(self) -> None:
        with self._lock:
            used = [wrapper for _, wrapper in self._used.values()]
            self._used.clear()
        _close(used)

    def __len__(self) -> int:
        return len(self._used)


def _close(wrappers: list[BaseDatabaseWrapper]) -> None:
    for wrapper in wrappers:
        if wrapper is connections[DEFAULT_DB_ALIAS]:
            continue
        wrapper.inc_thread_sharing()  # another thread's (or an ended thread's) connection
        try:
            wrapper.close()
        finally:
            wrapper.dec_thread_sharing()


def thread_key(thread_id: str) -> str:
    """The run's idempotency key: one run per tenant and thread."""
    return f"langgraph:{thread_id}"


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The statement as params["tenant"], which it carries into its own transaction (core.db.wire):
    LangGraph's threads never leave a tenant on a connection."""
    with tenant_bind(params["tenant"]):
        return wire.rows(sql, params)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


# --- threads ----------------------------------------------------------------------------------

# A thread's run is found by its key, or by what erasure made of the key when it held the subject's id
# (core.digests.erased_id, keyed and the same for the same key): an erased thread stays closed to its
# graph whatever its id (else "support-cust-1" starts afresh after the erasure, and a graph running
# during it writes the subject's data into the new run).
_THREAD_RUN = """
SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND idempotency_key IN (%(key)s, %(erased)s)
 ORDER BY idempotency_key = %(key)s DESC LIMIT 1
"""


def _thread_keys(tenant_id: UUID, thread_id: str) -> dict[str, Any]:
    key = thread_key(thread_id)
    return {"tenant": tenant_id, "key": key, "erased": erased_id(key)}


def thread_run(*, tenant_id: UUID, thread_id: str) -> UUID | None:
    rows = _rows(_THREAD_RUN, _thread_keys(tenant_id, thread_id))
    return rows[0][0] if rows else None


_THREAD_CLOSED = """
SELECT NOT (status = 'suspended' AND suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')
            AND NOT imported)
  FROM agent_runs WHERE tenant_id = %(tenant)s AND idempotency_key IN (%(key)s, %(erased)s)
   AND workflow_name = 'langgraph'
 ORDER BY idempotency_key = %(key)s DESC LIMIT 1
"""


def thread_closed(*, tenant_id: UUID, thread_id: str) -> bool:
    """The thread's run exists and takes no more checkpoints (cancelled, or its subject erased)."""
    rows = _rows(_THREAD_CLOSED, _thread_keys(tenant_id, thread_id))
    return bool(rows and rows[0][0])


def run_subject(*, tenant_id: UUID, run_id: UUID) -> str:
    rows = _rows(
        "SELECT subject FROM agent_runs WHERE run_id = %(run)s AND tenant_id = %(tenant)s",
        {"run": run_id, "tenant": tenant_id},
    )
    return rows[0][0] if rows else ""


# --- put ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Blobs:
    channels: list[str]
    versions: list[str]
    types: list[str]
    blobs: list[bytes | None]


def checkpoint_put(
    *,
    tenant_id: UUID,
    run_id: UUID,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    checkpoint_json: str,
    metadata_json: str,
    blobs: Blobs,
    payload_json: str | None,
    actor: str,
) -> int | None:
    """The run's revision that records the checkpoint (the event's seq when `payload_json` asks for
    one); None if the run no longer takes checkpoints (deleted, cancelled, erased)."""
    # A checkpoint of the graph's own moves the run (its row lock, and the next revision when someone
    # made it): the kernel's move, one round trip through libpq on every superstep.
    with tenant_bind(tenant_id):
        return apply(
            m.CheckpointPut(
                tenant_id=tenant_id,
                run_id=run_id,
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                parent_checkpoint_id=parent_checkpoint_id,
                checkpoint_json=checkpoint_json,
                metadata_json=metadata_json,
                # (channel, version, type) of each blob as one JSON text: cheaper to send than three arrays.
                blob_index_json=json.dumps(
                    list(zip(blobs.channels, blobs.versions, blobs.types, strict=True))
                ),
                blobs=blobs.blobs,
                payload_json=payload_json,
                actor=actor,
            )
        )


# --- writes -------------------------------------------------------------------------------------

# The writes go in only while the thread's run takes checkpoints (as keeper_langgraph_put's update
# asks), and the run's row is held (FOR SHARE) until they commit: an erasure or a cancel that changes
# the row waits for them and then finds them, or goes first and they are refused. Without this, a
# graph still running when its subject was erased stored its superstep's writes after the receipt.
_OPEN = """open AS (
  SELECT r.run_id FROM agent_runs r
   WHERE r.run_id = %(run)s AND r.tenant_id = %(tenant)s AND r.status = 'suspended'
     AND r.suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered') AND NOT r.imported
     FOR {lock})"""
_WRITES = """w AS (
  INSERT INTO langgraph_writes (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
                                idx, channel, type, blob)
  SELECT %(tenant)s, open.run_id, %(thread)s, %(ns)s, %(checkpoint_id)s, %(task)s, %(path)s, x.idx, x.channel,
         x.type, x.blob
    FROM open, unnest(%(idx)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[])
         AS x(idx, channel, type, blob)
  ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO {conflict})"""
_KEEP = _WRITES.format(conflict="NOTHING")
_REPLACE = _WRITES.format(
    conflict="UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob"
)
_WRITES_KEEP = f"WITH {_OPEN.format(lock='SHARE')}, {_KEEP} SELECT count(*) FROM open"
_WRITES_REPLACE = f"WITH {_OPEN.format(lock='SHARE')}, {_REPLACE} SELECT count(*) FROM open"


def writes_put(
    *,
    tenant_id: UUID,
    run_id: UUID,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    idx: Sequence[int],
    channels: Sequence[str],
    types: Sequence[str],
    blobs: Sequence[bytes | None],
    replace: bool,
    interrupt: tuple[str, str, str] | None = None,
) -> bool:
    """A task's writes, kept until the next checkpoint; written again they change nothing, except
    special writes (error, interrupt, resume...), which replace the earlier ones. `interrupt`
    (detail, event payload JSON, actor), for a root task's interrupt(), also makes the run wait for a
    person. False, and nothing written, when the run takes no more checkpoints (deleted, cancelled,
    erased)."""
    params: dict[str, Any] = {
        "tenant": tenant_id,
        "run": run_id,
        "thread": thread_id,
        "ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "task": task_id,
        "path": task_path,
        "idx": list(idx),
        "channels": list(channels),
        "types": list(types),
        "blobs": list(blobs),
    }
    if interrupt is None:
        rows = _rows(_WRITES_REPLACE if replace else _WRITES_KEEP, params)
        return bool(rows and rows[0][0])
    # A root task's interrupt(): its writes go in and the thread's run waits for a person (the kernel's
    # move: the run's row changes and an event records what the graph asks).
    detail, payload, actor = interrupt
    with tenant_bind(tenant_id):
        return apply(m.InterruptAsked(tenant_id, run_id, params, detail, json.loads(payload), actor))


# --- reads --------------------------------------------------------------------------------------

_SELECT = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, c.metadata,
       v.channels, v.types, v.blobs, w.tasks, w.channels, w.types, w.blobs
  FROM langgraph_checkpoints c
  LEFT JOIN LATERAL (
    SELECT array_agg(b.channel) AS channels, array_agg(b.type) AS types, array_agg(b.blob) AS blobs
      FROM jsonb_each_text(c.checkpoint -> 'channel_versions') cv
      JOIN langgraph_blobs b
        ON b.tenant_id = c.tenant_id AND b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
       AND b.channel = cv.key AND b.version = cv.value) v ON TRUE
  LEFT JOIN LATERAL (
    SELECT array_agg(w.task_id ORDER BY w.task_path, w.task_id, w.idx) AS tasks,
           array_agg(w.channel ORDER BY w.task_path, w.task_id, w.idx) AS channels,
           array_agg(w.type ORDER BY w.task_path, w.task_id, w.idx) AS types,
           array_agg(w.blob ORDER BY w.task_path, w.task_id, w.idx) AS blobs
      FROM langgraph_writes w
     WHERE w.tenant_id = c.tenant_id AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
       AND w.checkpoint_id = c.checkpoint_id) w ON TRUE
 WHERE c.tenant_id = %(tenant)s {where}
 ORDER BY c.checkpoint_id DESC
 {limit}
"""


@dataclass(frozen=True)
class StoredCheckpoint:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    values: list[tuple[str, str, bytes | None]]  # channel, type, blob
    writes: list[tuple[str, str, str, bytes | None]]  # task id, channel, type, blob


def _stored(row: tuple[Any, ...]) -> StoredCheckpoint:
    channels, types, blobs = row[6] or [], row[7] or [], row[8] or []
    tasks, wchannels, wtypes, wblobs = row[9] or [], row[10] or [], row[11] or [], row[12] or []
    return StoredCheckpoint(
        thread_id=row[0],
        checkpoint_ns=row[1],
        checkpoint_id=row[2],
        parent_checkpoint_id=row[3],
        checkpoint=_json(row[4]),
        metadata=_json(row[5]),
        values=[
            (c, t, None if b is None else bytes(b)) for c, t, b in zip(channels, types, blobs, strict=True)
        ],
        writes=[
            (k, c, t, None if b is None else bytes(b))
            for k, c, t, b in zip(tasks, wchannels, wtypes, wblobs, strict=True)
        ],
    )


def checkpoints_select(
    *,
    tenant_id: UUID,
    thread_id: str | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None = None,
    before_id: str | None = None,
    metadata_filter_json: str | None = None,
    limit: int | None = None,
) -> list[StoredCheckpoint]:
    """Newest first (checkpoint ids grow with time), with their channel values and pending writes."""
    where: list[str] = []
    params: dict[str, object] = {"tenant": tenant_id}
    for column, value in (
        ("thread_id", thread_id),
        ("checkpoint_ns", checkpoint_ns),
        ("checkpoint_id", checkpoint_id),
    ):
        if value is not None:
            where.append(f"AND c.{column} = %({column})s")
            params[column] = value
    if before_id is not None:
        where.append("AND c.checkpoint_id < %(before)s")
        params["before"] = before_id
    if metadata_filter_json is not None:
        where.append("AND c.metadata @> %(filter)s::jsonb")
        params["filter"] = metadata_filter_json
    sql = _SELECT.format(where=" ".join(where), limit="LIMIT %(limit)s" if limit is not None else "")
    if limit is not None:
        params["limit"] = limit
    return [_stored(row) for row in _rows(sql, params)]


# --- delete, copy, prune --------------------------------------------------------------------------


def thread_delete(*, tenant_id: UUID, thread_id: str) -> bool:
    """The thread and its run, events included (LangGraph's delete_thread: nothing of it is kept)."""
    with tenant_bind(tenant_id):
        return apply(m.ThreadDeleted(tenant_id, thread_id, thread_key(thread_id)))


# Checkpoints (and the writes on them) whose metadata names one of these LangGraph run ids. The
# events that recorded them stay in the Keeper run's log: they hold ids, step and source, no values.
_DELETE_FOR_RUNS = """
WITH c AS (DELETE FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND metadata ->> 'run_id' = ANY(%(runs)s)
           RETURNING thread_id, checkpoint_ns, checkpoint_id)
DELETE FROM langgraph_writes w USING c
 WHERE w.tenant_id = %(tenant)s AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
   AND w.checkpoint_id = c.checkpoint_id
"""


def runs_delete(*, tenant_id: UUID, run_ids: Sequence[str]) -> None:
    _rows(_DELETE_FOR_RUNS, {"tenant": tenant_id, "runs": list(run_ids)})


_COPY = """
WITH c AS (
  INSERT INTO langgraph_checkpoints (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id,
                                     parent_checkpoint_id, checkpoint, metadata, seq)
  SELECT tenant_id, %(target_run)s, %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint,
         metadata, %(seq)s
    FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND thread_id = %(source)s
  ON CONFLICT DO NOTHING),
b AS (
  INSERT INTO langgraph_blobs (tenant_id, run_id, thread_id, checkpoint_ns, channel, version, type, blob)
  SELECT tenant_id, %(target_run)s, %(target)s, checkpoint_ns, channel, version, type, blob
    FROM langgraph_blobs WHERE tenant_id = %(tenant)s AND thread_id = %(source)s
  ON CONFLICT DO NOTHING)
INSERT INTO langgraph_writes (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
                              idx, channel, type, blob)
SELECT tenant_id, %(target_run)s, %(target)s, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
       type, blob
  FROM langgraph_writes WHERE tenant_id = %(tenant)s AND thread_id = %(source)s
ON CONFLICT DO NOTHING
"""


def thread_copy(*, tenant_id: UUID, source: str, target: str, target_run_id: UUID, seq: int) -> None:
    _rows(
        _COPY,
        {"tenant": tenant_id, "source": source, "target": target, "target_run": target_run_id, "seq": seq},
    )


_PRUNE_KEEP_LATEST = """
WITH latest AS (
  SELECT DISTINCT ON (thread_id, checkpoint_ns) thread_id, checkpoint_ns, checkpoint_id
    FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND thread_id = ANY(%(threads)s)
   ORDER BY thread_id, checkpoint_ns, checkpoint_id DESC),
c AS (
  DELETE FROM langgraph_checkpoints c WHERE c.tenant_id = %(tenant)s AND c.thread_id = ANY(%(threads)s)
     AND (c.thread_id, c.checkpoint_ns, c.checkpoint_id) NOT IN (SELECT * FROM latest)),
w AS (
  DELETE FROM langgraph_writes w WHERE w.tenant_id = %(tenant)s AND w.thread_id = ANY(%(threads)s)
     AND (w.thread_id, w.checkpoint_ns, w.checkpoint_id) NOT IN (SELECT * FROM latest))
DELETE FROM langgraph_blobs b WHERE b.tenant_id = %(tenant)s AND b.thread_id = ANY(%(threads)s)
   AND NOT EXISTS (
     SELECT 1 FROM langgraph_checkpoints c JOIN latest l USING (thread_id, checkpoint_ns, checkpoint_id)
      WHERE c.tenant_id = %(tenant)s AND c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
        AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)
"""


def threads_prune_keep_latest(*, tenant_id: UUID, thread_ids: Sequence[str]) -> None:
    """Only the newest checkpoint of each namespace, its writes and the channel values it uses stay."""
    _rows(_PRUNE_KEEP_LATEST, {"tenant": tenant_id, "threads": list(thread_ids)})


_PRUNE_ALL = """
WITH w AS (DELETE FROM langgraph_writes WHERE tenant_id = %(tenant)s AND thread_id = ANY(%(threads)s)),
b AS (DELETE FROM langgraph_blobs WHERE tenant_id = %(tenant)s AND thread_id = ANY(%(threads)s))
DELETE FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND thread_id = ANY(%(threads)s)
"""


def threads_prune_all(*, tenant_id: UUID, thread_ids: Sequence[str]) -> None:
    """Every checkpoint, value and write of these threads; their runs and events stay (the record)."""
    _rows(_PRUNE_ALL, {"tenant": tenant_id, "threads": list(thread_ids)})
