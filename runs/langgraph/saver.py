"""KeeperSaver: LangGraph's checkpointer on Keeper's runs, in the graph's own process (sync and async).

A thread is a Keeper run of the tenant given to the saver (its subject from the thread's
`configurable.subject_id` when the run is created); each checkpoint is one database call that stores
it, its row the thread's record of it (a checkpoint someone made, by update_state or a fork, also
appends a `langgraph_checkpoint` event to the run); pending writes are kept until the next
checkpoint, so a superstep cut short resumes as LangGraph expects. Needs the `langgraph` extra.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast
from uuid import UUID

from asgiref.sync import sync_to_async
from django.db import IntegrityError
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from core.errors import InvalidInput, NotFound
from core.ids import uuid7
from core.tenancy import tenant_bind
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidState
from runs.kernel.state import EncodedState, state_encode
from runs.langgraph import store
from runs.langgraph.inbox import inbox_summary
from runs.langgraph.interrupts import Answer, answer_pending_get
from runs.langgraph.store import (
    CHECKPOINT_EVENT,
    INTERRUPT_CHANNEL,
    THREAD_REASON,
    WORKFLOW,
    Blobs,
    thread_key,
)

__all__ = ["KeeperSaver", "ThreadClosed", "CHECKPOINT_EVENT"]


class ThreadClosed(InvalidState):
    """The thread's run takes no more checkpoints: cancelled or erased in Keeper, or deleted."""


# LangGraph's metadata sources of the checkpoints a graph makes itself as it runs (its input, each
# superstep); "update" and "fork" are someone's change to the thread.
GRAPH_SOURCES = frozenset({"input", "loop"})


def _metadata_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str).replace("\\u0000", "")


def _inline(value: Any) -> bool:
    """A value JSON gives back exactly as it was (jsonb refuses NUL characters; 2**53 and beyond, NaN and
    infinities would not come back the same)."""
    kind = type(value)  # exactly these types: a subclass (an enum, a custom str) keeps its own type
    if value is None or kind is bool:
        return True
    if kind is str:
        return len(value) <= 1024 and "\x00" not in value
    if kind is int:
        return abs(value) < 2**53
    return kind is float and math.isfinite(value)


def _interrupt_event(checkpoint_id: str, task_id: str, value: Any, actor: str) -> tuple[str, str, str]:
    """What a root task's interrupt() asks, for the run (a line for the inbox: the value's text, or its
    "question") and its event (each interrupt's id and value as JSON; what JSON cannot hold, as text)."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    asked = [{"id": str(getattr(i, "id", "")), "value": getattr(i, "value", i)} for i in items]
    first = asked[0]["value"] if asked else ""
    if isinstance(first, dict) and isinstance(first.get("question"), str):
        first = first["question"]  # a plain convention: {"question": ..., ...}
    elif (line := inbox_summary(first)) is not None:
        first = line  # Agent Inbox's HumanInterrupt: its description
    detail = first if isinstance(first, str) else _metadata_json(first)
    payload = _metadata_json({"checkpoint_id": checkpoint_id, "task_id": task_id, "interrupts": asked})
    return detail[:300], payload, actor


def _closed(thread_id: str, what: str) -> ThreadClosed:
    return ThreadClosed(
        f"thread {thread_id!r} takes no more {what}: its Keeper run was cancelled or its subject erased",
        code="langgraph_thread_closed",
    )


def _key(value: Any, what: str = "thread id") -> str:
    """A thread id or namespace as stored: text PostgreSQL can hold (a NUL in a thread id would raise
    psycopg's DataError from deep inside the saver)."""
    text = str(value)
    if "\x00" in text:
        raise InvalidInput(
            f"a LangGraph {what} cannot hold a NUL character (PostgreSQL's text cannot): {text!r}",
            code="invalid_thread_id",
        )
    return text


def _vanished(thread_id: str) -> ThreadClosed:
    return ThreadClosed(f"thread {thread_id!r} vanished while writing", code="langgraph_thread_missing")


class KeeperSaver(BaseCheckpointSaver[str]):
    """`KeeperSaver(tenant_id=...)`; the graph's configurable `thread_id` names the thread (and run).

    Every statement runs on Django's connection as that tenant (row-level security) and names it.
    """

    def __init__(
        self,
        *,
        tenant_id: UUID,
        actor: str = "langgraph",
        graph: str = "",
        serde: SerializerProtocol | None = None,
    ):
        super().__init__(serde=serde)
        # The name the graph is registered with (runs.langgraph.graphs), recorded when a thread
        # starts: a person's answer to its interrupt is then resumed by a Keeper worker.
        self.graph = graph
        if not isinstance(tenant_id, UUID):
            raise TypeError("KeeperSaver takes the tenant's UUID")
        self.tenant_id = tenant_id
        self.actor = actor
        self._runs: dict[str, UUID] = {}  # thread id -> run id, learned once per process
        # LangGraph calls a saver from its own threads too (background checkpoint writes); each
        # uses that thread's Django connection. close() closes them all when the graph is done.
        self._connections = store.ThreadConnections()

    @contextmanager
    def _bound(self) -> Iterator[None]:
        """One call on this thread's connection (each statement of runs.langgraph.store runs as the
        saver's tenant by itself)."""
        self._connections.use()
        yield

    def close(self) -> None:
        """Close the connections the saver used in other threads (LangGraph's workers); the calling
        thread's connection is Django's to manage. Call it when the graph's process is done with it."""
        self._connections.close()

    async def aclose(self) -> None:
        """close() from async code (Django closes connections only outside an event loop)."""
        await sync_to_async(self.close)()

    # --- threads ----------------------------------------------------------------------------

    def _thread_run(self, config: RunnableConfig, thread_id: str) -> UUID:
        """The thread's run, created with its first checkpoint (idempotent per tenant and thread)."""
        run_id = self._runs.get(thread_id)
        if run_id is not None:
            return run_id
        run_id = store.thread_run(tenant_id=self.tenant_id, thread_id=thread_id)
        if run_id is None:
            run_id = self._thread_create(
                thread_id=thread_id,
                subject=_key(config.get("configurable", {}).get("subject_id") or "", "subject id"),
                event_type="langgraph_thread_started",
                payload={"thread_id": thread_id, **({"graph": self.graph} if self.graph else {})},
            )
        self._runs[thread_id] = run_id
        return run_id

    def _thread_create(
        self, *, thread_id: str, subject: str, event_type: str, payload: dict[str, Any]
    ) -> UUID:
        state = state_encode({"langgraph": {"thread_id": thread_id, "checkpoint_id": None}})
        run_id = uuid7()
        try:
            with tenant_bind(self.tenant_id):
                self._insert_run(run_id, thread_id, subject, event_type, payload, state.json, state.digest)
        except IntegrityError as exc:  # an unknown tenant: a 404 saying so, not the foreign key's raw message
            if "agent_runs_tenant_id" not in str(exc):
                raise
            raise NotFound(
                f"no tenant {self.tenant_id} in this Keeper: KeeperSaver takes an existing tenant's id",
                code="unknown_tenant",
            ) from None
        found = store.thread_run(tenant_id=self.tenant_id, thread_id=thread_id)  # ours, or a racer's
        if found is None:
            raise ThreadClosed(f"thread {thread_id!r} could not be created", code="langgraph_thread_missing")
        return found

    def _insert_run(
        self,
        run_id: UUID,
        thread_id: str,
        subject: str,
        event_type: str,
        payload: dict[str, Any],
        state_json: str,
        state_digest: str,
    ) -> None:
        apply(
            m.RunStarted(
                run_id=run_id,
                tenant_id=self.tenant_id,
                workflow_name=WORKFLOW,
                workflow_version="1",
                state_schema_version=1,
                next_step=WORKFLOW,
                state=EncodedState(state_json, state_digest),
                idempotency_key=thread_key(thread_id),
                input_digest=state_digest,
                payload=payload,
                actor=self.actor,
                event_type=event_type,
                suspend_reason=THREAD_REASON,
                subject=subject,
            )
        )

    # --- sync API -----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = _key(configurable["thread_id"])
        ns = _key(configurable.get("checkpoint_ns", ""), "checkpoint namespace")
        parent = configurable.get("checkpoint_id")
        values = checkpoint["channel_values"]
        # Plain JSON values (numbers, flags, short texts) ride inside the checkpoint row; the rest is
        # serialized once per channel version. A channel emptied at this version stores nothing.
        inline = {channel: value for channel, value in values.items() if _inline(value)}
        blobs = Blobs([], [], [], [])
        for channel, version in new_versions.items():
            if channel in values and channel not in inline:
                kind, data = self.serde.dumps_typed(values[channel])
                blobs.channels.append(channel)
                blobs.versions.append(str(version))
                blobs.types.append(kind)
                blobs.blobs.append(data)
        shape = {**{k: v for k, v in checkpoint.items() if k != "channel_values"}, "channel_values": inline}
        meta = get_serializable_checkpoint_metadata(config, metadata)
        meta_json = _metadata_json(meta)
        # The graph's own checkpoints (every superstep) are recorded by their rows; one someone made
        # (update_state, a fork) also gets an event on the run naming it and the saver's actor.
        payload = None
        if meta.get("source") not in GRAPH_SOURCES:
            payload = _metadata_json(
                {
                    "checkpoint_id": checkpoint["id"],
                    "checkpoint_ns": ns,
                    "parent_checkpoint_id": parent,
                    "step": meta.get("step"),
                    "source": meta.get("source"),
                }
            )
        with self._bound():
            for _ in range(2):  # a cached run deleted meanwhile: learn the thread's run again
                run_id = self._thread_run(config, thread_id)
                seq = store.checkpoint_put(
                    tenant_id=self.tenant_id,
                    run_id=run_id,
                    thread_id=thread_id,
                    checkpoint_ns=ns,
                    checkpoint_id=checkpoint["id"],
                    parent_checkpoint_id=parent,
                    checkpoint_json=json.dumps(shape, ensure_ascii=False),
                    metadata_json=meta_json,
                    blobs=blobs,
                    payload_json=payload,
                    actor=self.actor,
                )
                if seq is not None:
                    break
                self._refused(thread_id, run_id, "checkpoints")
            else:
                raise _vanished(thread_id)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        thread_id = _key(configurable["thread_id"])
        idx, channels, types, blobs = [], [], [], []
        for i, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            idx.append(WRITES_IDX_MAP.get(channel, i))
            channels.append(channel)
            types.append(kind)
            blobs.append(data)
        ns = configurable.get("checkpoint_ns", "")
        interrupt = None
        if ns == "" and INTERRUPT_CHANNEL in channels:
            interrupt = _interrupt_event(
                configurable["checkpoint_id"],
                task_id,
                writes[channels.index(INTERRUPT_CHANNEL)][1],
                self.actor,
            )
        with self._bound():
            for _ in range(2):  # a cached run deleted meanwhile: learn the thread's run again
                run_id = self._thread_run(config, thread_id)
                if store.writes_put(
                    tenant_id=self.tenant_id,
                    run_id=run_id,
                    thread_id=thread_id,
                    checkpoint_ns=ns,
                    checkpoint_id=configurable["checkpoint_id"],
                    task_id=task_id,
                    task_path=task_path,
                    idx=idx,
                    channels=channels,
                    types=types,
                    blobs=blobs,
                    replace=all(c in WRITES_IDX_MAP for c in channels),
                    interrupt=interrupt,
                ):
                    return
                # Nothing of the superstep is kept: an erased subject's data is not written back.
                self._refused(thread_id, run_id, "writes")
            raise _vanished(thread_id)

    def _refused(self, thread_id: str, run_id: UUID, what: str) -> None:
        """After the thread's run refused a write: ThreadClosed if that run is still the thread's
        (cancelled, or its subject erased). Another run (the thread deleted and started again
        elsewhere) or none: the caller's next round writes there, or starts the thread."""
        self._runs.pop(thread_id, None)
        if store.thread_run(tenant_id=self.tenant_id, thread_id=thread_id) == run_id:
            raise _closed(thread_id, what)

    def _tuple(self, row: store.StoredCheckpoint) -> CheckpointTuple:
        checkpoint = dict(row.checkpoint)
        checkpoint["channel_values"] = {
            **checkpoint.get("channel_values", {}),
            **{
                channel: self.serde.loads_typed((kind, cast(bytes, blob)))
                for channel, kind, blob in row.values
                if kind != "empty"
            },
        }
        base = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
        return CheckpointTuple(
            config={"configurable": {**base, "checkpoint_id": row.checkpoint_id}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=row.metadata,  # type: ignore[arg-type]
            parent_config=(
                {"configurable": {**base, "checkpoint_id": row.parent_checkpoint_id}}
                if row.parent_checkpoint_id
                else None
            ),
            pending_writes=[
                (task, channel, self.serde.loads_typed((kind, cast(bytes, blob))))
                for task, channel, kind, blob in row.writes
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint; None for a thread that has none yet. A thread whose subject was erased (its
        checkpoints deleted, its run closed) raises ThreadClosed here: LangGraph would otherwise start
        it afresh and run its first nodes (a tool call among them) before the first put is refused."""
        configurable = config["configurable"]
        thread_id = _key(configurable["thread_id"])
        with self._bound():
            rows = store.checkpoints_select(
                tenant_id=self.tenant_id,
                thread_id=thread_id,
                checkpoint_ns=configurable.get("checkpoint_ns", ""),
                checkpoint_id=get_checkpoint_id(config),
                limit=1,
            )
            if not rows and store.thread_closed(tenant_id=self.tenant_id, thread_id=thread_id):
                raise _closed(thread_id, "checkpoints")
        return self._tuple(rows[0]) if rows else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        thread_id = configurable.get("thread_id")
        with self._bound():
            rows = store.checkpoints_select(
                tenant_id=self.tenant_id,
                thread_id=None if thread_id is None else _key(thread_id),
                checkpoint_ns=configurable.get("checkpoint_ns"),
                checkpoint_id=configurable.get("checkpoint_id"),
                before_id=get_checkpoint_id(before) if before else None,
                metadata_filter_json=_metadata_json(filter) if filter else None,
                limit=limit,
            )
        for row in rows:
            yield self._tuple(row)

    def delete_thread(self, thread_id: str) -> None:
        with self._bound():
            store.thread_delete(tenant_id=self.tenant_id, thread_id=_key(thread_id))
        self._runs.pop(str(thread_id), None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        with self._bound():
            store.runs_delete(tenant_id=self.tenant_id, run_ids=[str(r) for r in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = _key(source_thread_id), _key(target_thread_id)
        with self._bound():
            source_run = store.thread_run(tenant_id=self.tenant_id, thread_id=source)
            if source_run is None:
                return
            subject = store.run_subject(tenant_id=self.tenant_id, run_id=source_run)
            if subject.startswith("erased:"):  # a copy would be an empty active thread
                raise ThreadClosed(
                    f"thread {source!r} cannot be copied: its subject was erased", code="subject_erased"
                )
            target_run = store.thread_run(tenant_id=self.tenant_id, thread_id=target) or self._thread_create(
                thread_id=target,
                subject=subject,
                event_type="langgraph_thread_copied",
                payload={
                    "thread_id": target,
                    "copied_from": {"thread_id": source, "run_id": str(source_run)},
                },
            )
            self._runs[target] = target_run
            store.thread_copy(
                tenant_id=self.tenant_id, source=source, target=target, target_run_id=target_run, seq=1
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        threads = [str(t) for t in thread_ids]
        if not threads:
            return
        with self._bound():
            if strategy == "keep_latest":
                store.threads_prune_keep_latest(tenant_id=self.tenant_id, thread_ids=threads)
            elif strategy == "delete":
                store.threads_prune_all(tenant_id=self.tenant_id, thread_ids=threads)
            else:
                raise ValueError(f"unknown prune strategy {strategy!r}: 'keep_latest' or 'delete'")

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A growing integer part (the order LangGraph compares) and a random tail, so two branches
        of a thread (a fork, update_state) never give one version to two different values."""
        if current is None:
            number = 0
        elif isinstance(current, int | float):
            number = int(current)
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():.16f}"

    # --- a person's answer ---------------------------------------------------------------------

    def interrupt_answer(self, thread_id: str) -> Answer | None:
        """The answer a person gave in Keeper to the thread's interrupt, not resumed with yet: run the
        graph with `Command(resume=answer.resume)` on the thread (None: nothing waits)."""
        with self._bound():
            return answer_pending_get(tenant_id=self.tenant_id, thread_id=str(thread_id))

    # --- async API: the same calls on Django's connection in its one thread -------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await sync_to_async(self.put)(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await sync_to_async(self.put_writes)(config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await sync_to_async(self.get_tuple)(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        rows = await sync_to_async(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )()
        for row in rows:
            yield row

    async def adelete_thread(self, thread_id: str) -> None:
        await sync_to_async(self.delete_thread)(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await sync_to_async(self.delete_for_runs)(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await sync_to_async(self.copy_thread)(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await sync_to_async(self.prune)(thread_ids, strategy=strategy)
