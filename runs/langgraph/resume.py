"""A worker resumes a registered LangGraph graph with the answer a person gave (the `langgraph` extra).

One resume per answer: a session advisory lock on the run keeps a second delivery of the task out
while the first runs, and the answer must still be pending once the lock is held.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any
from uuid import UUID

from django.db import connection
from langgraph.types import Command

from runs.langgraph.graphs import graph_get
from runs.langgraph.interrupts import answer_pending_get
from runs.langgraph.memory_store import KeeperStore
from runs.langgraph.saver import KeeperSaver

logger = logging.getLogger(__name__)
ACTOR = "keeper-worker"


def thread_resume(*, tenant_id: UUID, run_id: UUID) -> bool:
    """Run the thread's graph on with its pending answer; False if nothing waits or the graph is not
    registered here (the answer then waits for the graph's own process)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [f"langgraph:{run_id}"])
        if not cursor.fetchone()[0]:
            return False  # another worker is resuming it
    try:
        answer = answer_pending_get(tenant_id=tenant_id, run_id=run_id)
        if answer is None:
            return False
        builder = graph_get(answer.graph)
        if builder is None:
            logger.warning(
                "graph %r of run %s is not registered here; the answer waits", answer.graph, run_id
            )
            return False
        saver = KeeperSaver(tenant_id=tenant_id, graph=answer.graph, actor=ACTOR)
        # A builder that takes `store` gets the tenant's KeeperStore: the graph remembers through it
        # when a worker resumes it as when its own process runs it.
        # Its writer is the graph's name, as the graph's own process names it (the example does).
        store = (
            KeeperStore(tenant_id=tenant_id, actor=f"graph:{answer.graph}") if _takes_store(builder) else None
        )
        try:
            graph = builder(saver, store=store) if store is not None else builder(saver)
            # Each superstep's checkpoint before the next runs: a cancel or an erasure of the thread
            # stops the graph at its next step, not after every node of this invoke has acted.
            graph.invoke(
                Command(resume=answer.resume),
                {"configurable": {"thread_id": answer.thread_id}},
                durability="sync",
            )
        finally:
            saver.close()
            if store is not None:
                store.close()
        return True
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [f"langgraph:{run_id}"])


def _takes_store(builder: Any) -> bool:
    try:
        return "store" in inspect.signature(builder).parameters
    except (TypeError, ValueError):  # a builder without a signature to read: the checkpointer alone
        return False
