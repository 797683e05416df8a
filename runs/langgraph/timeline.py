"""A LangGraph thread's checkpoints for the engineer: the state at each, and a fork from one (the
`langgraph` extra: values are read with the saver's serializer).

A fork is a new checkpoint on the same thread whose parent is the chosen one, with that checkpoint's
channel values and versions (LangGraph's `update_state(config_at_checkpoint, None)`): the thread's
latest checkpoint is then the fork, so `graph.invoke(None, thread)` runs on from there; the branch it
leaves stays in the thread's history, and the Keeper run (its tenant, subject, console page) is the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from langgraph.checkpoint.base import CheckpointMetadata, create_checkpoint

from runs.kernel.errors import InvalidState
from runs.langgraph import store
from runs.langgraph.saver import KeeperSaver

MAX_CHECKPOINTS = 100


@dataclass(frozen=True)
class CheckpointRow:
    checkpoint_id: str
    parent_checkpoint_id: str | None
    step: Any
    source: Any
    ts: str
    forked_from: str | None
    interrupted: bool


def _plain(value: Any) -> Any:
    """The value as JSON shows it (what JSON cannot hold becomes its text)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def thread_checkpoint_list(
    *, tenant_id: UUID, thread_id: str, limit: int = MAX_CHECKPOINTS
) -> list[CheckpointRow]:
    """The thread's root checkpoints, newest first."""
    rows = store.checkpoints_select(tenant_id=tenant_id, thread_id=thread_id, checkpoint_ns="", limit=limit)
    return [
        CheckpointRow(
            checkpoint_id=r.checkpoint_id,
            parent_checkpoint_id=r.parent_checkpoint_id,
            step=r.metadata.get("step"),
            source=r.metadata.get("source"),
            ts=str(r.checkpoint.get("ts", ""))[:23].replace("T", " "),
            forked_from=r.metadata.get("forked_from"),
            interrupted=any(channel == store.INTERRUPT_CHANNEL for _, channel, _, _ in r.writes),
        )
        for r in rows
    ]


def thread_checkpoint_state(*, tenant_id: UUID, thread_id: str, checkpoint_id: str) -> dict[str, Any] | None:
    """The channel values at a root checkpoint (None: no such checkpoint in this tenant's thread)."""
    saver = KeeperSaver(tenant_id=tenant_id)
    found = saver.get_tuple(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    )
    if found is None:
        return None
    return {
        k: _plain(v)
        for k, v in sorted(found.checkpoint["channel_values"].items())
        if not k.startswith("branch:")
    }


def thread_checkpoint_fork(
    *, tenant_id: UUID, thread_id: str, checkpoint_id: str, actor: str, note: str, request_token: str = ""
) -> tuple[str, bool]:
    """A new latest checkpoint of the thread, a copy of `checkpoint_id` with it as parent: (its id,
    True). With a request token (the console form's), the same request sent again gives back the
    fork it made (its id, False) and writes nothing. Call it with the thread's run row locked, so a
    request sent twice at once waits for the first."""
    saver = KeeperSaver(tenant_id=tenant_id, actor=actor)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    try:
        if request_token:
            thread = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            for made in saver.list(thread, filter={"fork_request": request_token}, limit=1):  # type: ignore[arg-type]
                return str(made.config["configurable"]["checkpoint_id"]), False
        found = saver.get_tuple(config)  # type: ignore[arg-type]
        if found is None:
            raise InvalidState("no such checkpoint in this thread", code="langgraph_checkpoint_not_found")
        step = found.metadata.get("step", -1)
        fork = create_checkpoint(found.checkpoint, None, step if isinstance(step, int) else -1)
        metadata = cast(
            CheckpointMetadata,
            {
                "source": "fork",
                "step": step if isinstance(step, int) else -1,
                "parents": {},
                "forked_from": checkpoint_id,
                "forked_by": actor,
                "note": note,
                **({"fork_request": request_token} if request_token else {}),
            },
        )
        saver.put(config, fork, metadata, {})  # type: ignore[arg-type]
    finally:
        saver.close()
    return fork["id"], True
