"""Every SQL statement of LangGraph threads: a checkpoint is one call that locks its run and stores it.

Like runs/engine/store.py, each write is one statement through Django's connection (the caller's
transaction, the tenant row-level security sees), and every statement also names the tenant, so a
connection left bound to another tenant finds nothing instead of another tenant's thread. No
LangGraph import here: the saver (runs/langgraph/saver.py) serializes, this module stores bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from core.digests import erased_id
from core.tenancy import tenant_bind, tenant_is_bound
from runs.engine import store as engine_store
from runs.engine import wire

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
    """The statement as params["tenant"]. Outside a transaction it goes in one round trip with the
    tenant set for its own transaction only (BEGIN, set_config local, the statement, COMMIT, pipelined),
    so LangGraph's threads never leave a tenant on a connection and pay no extra round trips for it.
    Inside the caller's transaction, or a block that bound this tenant, it joins them."""
    tenant_id = params["tenant"]
    connection.ensure_connection()
    if connection.in_atomic_block or tenant_is_bound(tenant_id):
        with tenant_bind(tenant_id):
            return engine_store._rows(sql, params)
    raw = connection.connection
    prepare = settings.KEEPER_PREPARED_STATEMENTS
    if raw.prepare_threshold is None and prepare:
        raw.prepare_threshold = 2**31  # as runs.engine.store: only these statements are prepared
    with connection.wrap_database_errors:
        with raw.pipeline():
            # Both before one Sync: one implicit transaction, so the local setting ends with it.
            psycopg.Cursor(raw).execute(_SET_TENANT, [str(tenant_id)], prepare=prepare)
            cursor = psycopg.Cursor(raw).execute(sql, params, prepare=prepare)
        return cursor.fetchall() if cursor.description else []


_SET_TENANT = "SELECT set_config('app.tenant_id', %s, true)"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


# --- threads ----------------------------------------------------------------------------------

# A thread's run is found by its key, or by what erasure made of the key when it held the subject's id
# (core.digests.erased_id, keyed and the same for the same key): an erased thread stays closed to its
# graph whatever its id (found from outside: "support-cust-1" was started afresh after the erasure,
# and a graph running during it wrote the subject's data into the new run).
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

# One call (runs 0029's keeper_langgraph_put): as the tenant, a graph's own checkpoint locks the run's
# row (so a cancel or an erasure waits for it or refuses it), stores the new channel values once per
# version and writes the checkpoint row, its record; one someone made (`payload`: update_state, a fork)
# also takes the run's next revision and appends the event that names it. No run row back (deleted,
# cancelled, erased): NULL.
_PUT = wire.Statement(
    "keeper_langgraph_put",
    "SELECT keeper_langgraph_put($1::uuid, $2::uuid, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb,"
    " $10::bytea[], $11::jsonb, $12)",
    params=12,
    binary=[9],
)


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
    # Sent through libpq as they are (runs.engine.wire): the put is made on every superstep. The
    # function binds the tenant itself, for this call only.
    seq = _PUT.first_value(
        [
            str(tenant_id).encode(),
            str(run_id).encode(),
            thread_id.encode(),
            checkpoint_ns.encode(),
            checkpoint_id.encode(),
            None if parent_checkpoint_id is None else parent_checkpoint_id.encode(),
            checkpoint_json.encode(),
            metadata_json.encode(),
            # (channel, version, type) of each blob as one JSON text: cheaper to send than three arrays.
            json.dumps(list(zip(blobs.channels, blobs.versions, blobs.types, strict=True))).encode(),
            wire.bytea_array(blobs.blobs),
            None if payload_json is None else payload_json.encode(),
            actor.encode(),
        ]
    )
    return None if seq is None else int(seq)


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
# A root task's interrupt(): with its writes, the thread's run waits for a person (the support inbox)
# and an event records what the graph asks, unless the thread has moved past this checkpoint. The
# row is updated as it is when the statement gets it, so two tasks interrupting at once both count.
# The row is locked FOR UPDATE from the start: two tasks of one superstep that interrupt at once each
# held it FOR SHARE and then waited for the other to update it (a deadlock, found under load).
_LOCK_RUN = "SELECT 1 FROM agent_runs WHERE run_id = %(run)s AND tenant_id = %(tenant)s FOR UPDATE"
_WRITES_INTERRUPT = f"""WITH {_OPEN.format(lock="UPDATE")}, {_REPLACE},
u AS (
  UPDATE agent_runs
     SET state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'langgraph_interrupt',
         -- Tasks of one superstep that interrupt together: the inbox line names every question.
         suspend_detail = CASE WHEN suspend_reason = 'langgraph_interrupt' AND suspend_detail <> ''
                                    AND strpos(suspend_detail, %(detail)s) = 0
                               THEN left(suspend_detail || ' · ' || %(detail)s, 300) ELSE %(detail)s END
   WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND status = 'suspended'
     AND suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered') AND NOT imported
     AND NOT EXISTS (SELECT 1 FROM langgraph_checkpoints c
                      WHERE c.tenant_id = %(tenant)s AND c.thread_id = %(thread)s AND c.checkpoint_ns = ''
                        AND c.checkpoint_id > %(checkpoint_id)s)
  RETURNING run_id, tenant_id, state_revision, state_digest, next_step),
e AS (
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                            state_revision, state_digest, state, next_step, created_at)
  SELECT u.run_id, u.tenant_id, u.state_revision, 'langgraph_interrupt', NULL, NULL, %(payload)s::jsonb,
         %(actor)s, u.state_revision, u.state_digest, NULL, u.next_step, statement_timestamp()
    FROM u)
SELECT count(*) FROM open"""


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
    params.update(detail=interrupt[0], payload=interrupt[1], actor=interrupt[2])
    # The row is locked before the statement that asks whether the thread moved past this checkpoint,
    # so that statement's snapshot sees a checkpoint put while it waited (a graph's put locks the row,
    # and changes nothing on it a re-read could see).
    with transaction.atomic(), tenant_bind(tenant_id):
        _rows(_LOCK_RUN, params)
        rows = _rows(_WRITES_INTERRUPT, params)
    return bool(rows and rows[0][0])


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

_DELETE_THREAD = """
WITH r AS (SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND idempotency_key = %(key)s
                                           AND workflow_name = 'langgraph'),
w AS (DELETE FROM langgraph_writes WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
b AS (DELETE FROM langgraph_blobs WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
c AS (DELETE FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
e AS (DELETE FROM agent_events WHERE tenant_id = %(tenant)s AND run_id IN (SELECT run_id FROM r))
DELETE FROM agent_runs WHERE tenant_id = %(tenant)s AND run_id IN (SELECT run_id FROM r) RETURNING run_id
"""


def thread_delete(*, tenant_id: UUID, thread_id: str) -> bool:
    """The thread and its run, events included (LangGraph's delete_thread: nothing of it is kept)."""
    return bool(
        _rows(_DELETE_THREAD, {"tenant": tenant_id, "thread": thread_id, "key": thread_key(thread_id)})
    )


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
