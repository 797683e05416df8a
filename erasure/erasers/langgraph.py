"""A subject's LangGraph threads in the erasure registry: their checkpoints, channel values and writes.

The thread's run and events are the runs eraser's (redacted like any run of the subject); this eraser
deletes the rows LangGraph loads a checkpoint from, so nothing of the subject's graph state is left.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.db import connection

from core.digests import strings_in
from core.tenancy import tenant_scope
from erasure.matching import CODE, IDENTIFIER_SUBSTRING_CHARS, Scope, free_text_value
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.conversations.erasure import ERASED

TABLES = ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes")
_IN_TENANT = "t.tenant_id = %(tenant)s"
_MINE = "t.run_id = ANY(%(runs)s::uuid[])"
_OWNER = "(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.run_id)"

_SUBJECT_THREADS = """
WITH RECURSIVE tree AS (
  SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND subject IN (%(subject)s, %(erased)s)
  UNION
  SELECT r.run_id FROM agent_runs r JOIN tree ON r.parent_run_id = tree.run_id WHERE r.tenant_id = %(tenant)s)
SELECT run_id FROM tree JOIN agent_runs USING (run_id) WHERE workflow_name = 'langgraph'
"""


_ASKED_AND_ANSWERED = """
SELECT jsonb_build_object('asked', payload -> 'interrupts', 'answer', payload -> 'answer', 'note', payload -> 'note')
  FROM agent_events
 WHERE tenant_id = %(tenant)s AND run_id = ANY(%(runs)s::uuid[])
   AND event_type IN ('langgraph_interrupt', 'langgraph_interrupt_answered')
"""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _texts(value: Any) -> list[str]:
    """The strings of a person's answer or note, but machine codes (an answer "approve" is a
    decision) and what an erasure already wrote there."""
    return [t for t in strings_in(value) if free_text_value(t) and t != ERASED and not CODE.fullmatch(t)]


def _asked(interrupts: Any) -> list[str]:
    """What the graph asked in words: the texts of its interrupts' values that are sentences or hold
    a letter outside ASCII (the question, what the customer said, 王芳). Codes and identifiers it
    showed beside them (an order's status, its id, a currency) are the graph's data: erased with the
    event, and elsewhere left as any run's data is."""
    return [t for t in _texts(interrupts) if " " in t.strip() or not t.isascii()]


class LangGraphEraser(Eraser):
    name = "langgraph"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            cursor.execute(
                _SUBJECT_THREADS,
                {"tenant": tenant_id, "subject": subject_id, "erased": f"erased:{subject_digest}"},
            )
            run_ids = tuple(sorted(row[0] for row in cursor.fetchall()))
            # What the threads' graphs asked a person, and what the person answered (their events):
            # texts the runs eraser then redacts wherever the subject's runs hold them.
            cursor.execute(_ASKED_AND_ANSWERED, {"tenant": tenant_id, "runs": list(run_ids)})
            values: set[str] = set()
            for (payload,) in cursor.fetchall():
                said = _json(payload)
                asked = [i.get("value") for i in said.get("asked") or [] if isinstance(i, dict)]
                values.update(_asked(asked), _texts(said.get("answer")), _texts(said.get("note")))
        return Scope(
            tenant_id=tenant_id, subject_id=subject_id, run_ids=run_ids, values=tuple(sorted(values))
        )

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        with tenant_scope(scope.tenant_id), connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(
                    f"DELETE FROM {table} WHERE tenant_id = %s AND run_id = ANY(%s::uuid[])",  # noqa: S608
                    [scope.tenant_id, list(scope.run_ids)],
                )
                counts[table] = cursor.rowcount
        return counts

    def places(self) -> list[Place]:
        return [
            *(
                column_place(
                    table=table,
                    column=column,
                    kind=kind,
                    tenant_sql=_IN_TENANT,
                    erased_by=self.name,
                    mine_sql=_MINE,
                    owner_sql=_OWNER,
                    what=f"{table}.{column} (deleted)",
                )
                for table, column, kind in (
                    ("langgraph_checkpoints", "checkpoint", "json"),
                    ("langgraph_checkpoints", "metadata", "json"),
                    ("langgraph_checkpoints", "thread_id", "text"),
                    ("langgraph_blobs", "thread_id", "text"),
                    ("langgraph_writes", "thread_id", "text"),
                )
            ),
            _blob_place("langgraph_blobs"),
            _blob_place("langgraph_writes"),
        ]

    def free(self) -> list[Free]:
        ids = "LangGraph's ids, namespaces, channel names, versions and serializer types"
        return [
            free("langgraph_checkpoints", ids, "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id"),
            free("langgraph_blobs", ids, "checkpoint_ns", "channel", "version", "type"),
            free(
                "langgraph_writes",
                ids,
                "checkpoint_ns",
                "checkpoint_id",
                "task_id",
                "task_path",
                "channel",
                "type",
            ),
        ]


def holds_id(blob: bytes, subject_id: str) -> bool:
    """Whether serialized bytes hold the subject's id as the scan counts it in text: from
    IDENTIFIER_SUBSTRING_CHARS characters as a whole token (no ASCII letter or digit on either side:
    "cust-10" is not in "cust-1001"), a shorter one only as a whole string value (msgpack's header of
    exactly its length, or quotes, before it): a byte substring would make "cust-10" and "42"
    ("42.00 EUR") match other subjects' threads, and their erasures could never complete."""
    needle = subject_id.encode()
    n = len(needle)
    start = blob.find(needle)
    while start >= 0:
        before = blob[start - 1 : start]
        after = blob[start + n : start + n + 1]
        if len(subject_id) >= IDENTIFIER_SUBSTRING_CHARS:
            if not (before.isalnum() and before.isascii()) and not (after.isalnum() and after.isascii()):
                return True
        else:
            header = blob[start - 2 : start]
            whole = (
                (n < 32 and before == bytes([0xA0 | n]))
                or header == bytes([0xD9, n])
                or (before == b'"' and after == b'"')
            )
            if whole:
                return True
        start = blob.find(needle, start + 1)
    return False


def _blob_place(table: str) -> Place:
    """Serialized values (bytes): every row of the subject's threads is a trace, and so is any row of
    the tenant whose bytes hold the subject's id (holds_id: the rows with the bytes, then the rule)."""
    mine = (
        f"SELECT count(*) FROM {table} t WHERE t.tenant_id = %(tenant)s AND t.run_id = ANY(%(runs)s::uuid[])"  # noqa: S608
    )
    others = f"""
        SELECT t.blob FROM {table} t
         WHERE t.tenant_id = %(tenant)s AND NOT (t.run_id = ANY(%(runs)s::uuid[]))
           AND position(convert_to(%(subject)s, 'UTF8') IN t.blob) > 0
    """  # noqa: S608 - the table name is one of ours

    def count(scope: Scope) -> int:
        params: dict[str, Any] = {
            "tenant": scope.tenant_id,
            "runs": list(scope.run_ids),
            "subject": scope.subject_id,
        }
        with connection.cursor() as cursor:
            cursor.execute(mine, params)
            found = int(cursor.fetchone()[0])
            cursor.execute(others, params)
            return found + sum(1 for (blob,) in cursor.fetchall() if holds_id(bytes(blob), scope.subject_id))

    return Place(
        name=f"{table}.blob",
        what=f"{table}.blob (LangGraph's serialized values, deleted)",
        erased_by="langgraph",
        count=count,
        columns=((table, "blob"),),
    )
