"""The operation protocol's statements: prepare once, and every move along it, each one statement.

A move names the statuses it may come from (OPERATION_TRANSITIONS); with a lease epoch it happens
only while the acting run is still held at that epoch, checked in the same statement.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from core.db import wire
from runs.kernel.records import OperationRow


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


_OP_COLUMNS = (
    "operation_id, run_id, status, request_digest, tool_contract_version, external_ref, result, attempts"
)


def _op(row: tuple[Any, ...]) -> OperationRow:
    op_id, run_id, status, digest, contract, ref, result, attempts = row
    return OperationRow(op_id, run_id, status, digest, contract, ref, _json(result), attempts)


def _history_entry(status: str) -> str:
    return (
        "jsonb_build_array(jsonb_build_object('status', " + status + ", 'at', statement_timestamp(), "
        "'by', %(actor)s::text, 'note', %(note)s::text))"
    )


_OP_PREPARE = f"""
WITH ins AS (
  INSERT INTO tool_operations (operation_id, tenant_id, run_id, step_id, tool_name, tool_contract_version,
                               request_digest, status, attempts, history, created_at, updated_at)
  VALUES (%(op)s, %(tenant)s, %(run)s, %(step)s, %(tool)s, %(contract)s, %(digest)s, 'prepared', 0,
          {_history_entry("'prepared'")}, statement_timestamp(), statement_timestamp())
  ON CONFLICT (tenant_id, operation_id) DO NOTHING
  RETURNING {_OP_COLUMNS})
SELECT {_OP_COLUMNS} FROM ins
UNION ALL
SELECT {_OP_COLUMNS} FROM tool_operations
 WHERE tenant_id = %(tenant)s AND operation_id = %(op)s AND NOT EXISTS (SELECT 1 FROM ins)
"""


def operation_prepare_once(
    *,
    tenant_id: UUID,
    operation_id: str,
    run_id: UUID,
    step_id: str,
    tool_name: str,
    tool_contract_version: str,
    request_digest: str,
    actor: str,
) -> OperationRow:
    """The operation row, created `prepared` the first time; the existing one on every later call."""
    rows = wire.rows(
        _OP_PREPARE,
        {
            "op": operation_id,
            "tenant": tenant_id,
            "run": run_id,
            "step": step_id,
            "tool": tool_name,
            "contract": tool_contract_version,
            "digest": request_digest,
            "actor": actor,
            "note": "",
        },
    )
    return _op(rows[0])


_OP_TRANSITION = f"""
UPDATE tool_operations o
   SET status = %(to)s::text,
       attempts = o.attempts + CASE WHEN %(to)s::text = 'started' THEN 1 ELSE 0 END,
       external_ref = COALESCE(%(ref)s, o.external_ref),
       result = COALESCE(%(result)s::jsonb, o.result),
       history = o.history || {_history_entry("%(to)s::text")},
       call_deadline_at = CASE WHEN %(to)s::text = 'started'
                               THEN statement_timestamp() + make_interval(secs => %(call_timeout)s::float8)
                               WHEN %(call_ended)s THEN LEAST(o.call_deadline_at, statement_timestamp())
                               ELSE o.call_deadline_at END,
       updated_at = statement_timestamp()
 WHERE o.tenant_id = %(tenant)s AND o.operation_id = %(op)s
   AND (o.status = ANY(%(from)s) OR (%(late)s AND o.status = 'prepared' AND o.attempts > 0))
   AND (%(epoch)s::bigint IS NULL OR EXISTS (
        SELECT 1 FROM agent_runs r WHERE r.run_id = %(acting_run)s::uuid AND r.tenant_id = %(tenant)s
           AND r.lease_epoch = %(epoch)s::bigint
           AND r.lease_owner = %(actor)s))
RETURNING {_OP_COLUMNS.replace("operation_id", "o.operation_id")}
"""

# The protocol's transitions. started → prepared happens only when an authoritative lookup (or a
# person) confirms the request was not applied, which is what permits sending it again.
OPERATION_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "started": ("prepared",),
    "succeeded": ("started", "unknown"),
    "failed": ("started",),
    "unknown": ("started",),
    "prepared": ("started", "unknown"),
}


def operation_transition(
    *,
    tenant_id: UUID,
    operation_id: str,
    to_status: str,
    actor: str,
    note: str = "",
    external_ref: str | None = None,
    result_json: str | None = None,
    lease_epoch: int | None = None,
    acting_run_id: UUID | None = None,
    late: bool = False,
    call_timeout: float = 0.0,
    call_ended: bool = False,
) -> OperationRow | None:
    """Move the operation along the protocol; None if it is not in a status that allows this move.

    With `lease_epoch`, the move happens only while `actor` still holds the lease of the acting run
    (a fork acts on its parent's operation) at that epoch: a worker that lost its lease cannot start
    a side effect. `late`: a final outcome from a worker that sent the request and then lost its
    lease may also settle an operation a take-over found not applied and prepared again (started
    before, not started since): what the outside system did is the truth.
    """
    rows = wire.rows(
        _OP_TRANSITION,
        {
            "tenant": tenant_id,
            "op": operation_id,
            "to": to_status,
            "from": list(OPERATION_TRANSITIONS[to_status]),
            "ref": external_ref,
            "result": result_json,
            "actor": actor,
            "note": note,
            "epoch": lease_epoch,
            "acting_run": acting_run_id,
            "late": late and to_status in ("succeeded", "failed"),
            "call_timeout": call_timeout,
            "call_ended": call_ended,
        },
    )
    return _op(rows[0]) if rows else None


# A person's correction of a person's reconciliation: the operation's recorded outcome replaced (its
# history keeps both: the new entry names the outcome and reference it replaces), only while it is
# still as the person saw it (same status, same number of moves).
_OP_CORRECT = f"""
UPDATE tool_operations o
   SET status = %(to)s::text,
       external_ref = %(ref)s,
       result = %(result)s::jsonb,
       call_deadline_at = NULL,
       history = o.history || jsonb_build_array(jsonb_build_object(
           'status', %(to)s::text, 'at', statement_timestamp(), 'by', %(actor)s::text, 'note', %(note)s::text,
           'external_ref', %(ref)s::text, 'corrects',
           jsonb_build_object('status', o.status, 'external_ref', o.external_ref))),
       updated_at = statement_timestamp()
 WHERE o.tenant_id = %(tenant)s AND o.operation_id = %(op)s AND o.status = %(from)s::text
   AND jsonb_array_length(o.history) = %(moves)s
RETURNING {_OP_COLUMNS.replace("operation_id", "o.operation_id")}
"""


def operation_correct(
    *,
    tenant_id: UUID,
    operation_id: str,
    from_status: str,
    moves: int,
    to_status: str,
    actor: str,
    note: str,
    external_ref: str | None,
    result_json: str | None,
) -> OperationRow | None:
    """Replace a reconciled operation's outcome (`succeeded` with a reference, or `prepared`: one more
    send); None if it changed since it was read (`from_status`, `moves` history entries)."""
    rows = wire.rows(
        _OP_CORRECT,
        {
            "tenant": tenant_id,
            "op": operation_id,
            "from": from_status,
            "moves": moves,
            "to": to_status,
            "ref": external_ref,
            "result": result_json,
            "actor": actor,
            "note": note,
        },
    )
    return _op(rows[0]) if rows else None
