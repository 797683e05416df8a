"""A graph's own process for the crash test: `python -m tests.runs.langgraph.graph_process keeper|postgres
THREAD OUT` runs (or resumes) the support graph on KeeperSaver or LangGraph's PostgresSaver and writes
the final state to OUT. KEEPER_LG_CRASH_ONCE makes it SIGKILL itself in the middle of a superstep."""

from __future__ import annotations

import json
import os
import sys
from uuid import UUID


def main(kind: str, thread: str, out: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    if kind == "keeper":
        import django

        django.setup()
        from runs.langgraph.saver import KeeperSaver
        from tests.runs.langgraph.graphs import support_graph

        saver = KeeperSaver(tenant_id=UUID(os.environ["KEEPER_LG_TENANT"]))
        graph = support_graph(saver)
        result = _invoke(graph, config)
        saver.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        from tests.runs.langgraph.graphs import support_graph

        with PostgresSaver.from_conn_string(os.environ["KEEPER_LG_BASELINE_URL"]) as baseline:
            baseline.setup()  # its tables, once (idempotent)
            result = _invoke(support_graph(baseline), config)
    with open(out, "w") as f:
        json.dump(result, f)


def _invoke(graph, config):
    # A thread with a checkpoint resumes from it (None as input); a new one starts.
    started = graph.get_state(config).values
    return graph.invoke(None if started else {"note": "parcel arrived broken", "log": []}, config)


if __name__ == "__main__":
    main(*sys.argv[1:4])
