"""Small LangGraph graphs the tests run on KeeperSaver and on LangGraph's own PostgresSaver."""

from __future__ import annotations

import operator
import os
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph


class Ticket(TypedDict):
    note: str
    log: Annotated[list[str], operator.add]


def support_graph(checkpointer: Any) -> Any:
    """intake -> (lookup, policy in one superstep) -> answer."""

    def intake(state: Ticket) -> dict[str, Any]:
        return {"log": [f"intake: {state['note']}"]}

    def lookup(state: Ticket) -> dict[str, Any]:
        calls = os.environ.get("KEEPER_LG_CALLS")  # the crash test counts how often lookup ran
        if calls:
            with open(calls, "a") as f:
                f.write("lookup\n")
        return {"log": ["lookup: order found"]}

    def policy(state: Ticket) -> dict[str, Any]:
        # The crash test kills the process here, after lookup's write is kept and before this
        # task's: the superstep is cut in the middle.
        marker = os.environ.get("KEEPER_LG_CRASH_ONCE")
        if marker and not os.path.exists(marker):
            time.sleep(1.0)  # lookup has finished and its write is kept by now
            open(marker, "w").close()  # noqa: SIM115 - a marker file, closed at once
            os.kill(os.getpid(), 9)
        return {"log": ["policy: refund allowed"]}

    def answer(state: Ticket) -> dict[str, Any]:
        return {"log": [f"answer: {len(state['log'])} notes"]}

    graph = StateGraph(Ticket)
    graph.add_node("intake", intake)
    graph.add_node("lookup", lookup)
    graph.add_node("policy", policy)
    graph.add_node("answer", answer)
    graph.add_edge(START, "intake")
    graph.add_edge("intake", "lookup")
    graph.add_edge("intake", "policy")
    graph.add_edge(["lookup", "policy"], "answer")
    graph.add_edge("answer", END)
    return graph.compile(checkpointer=checkpointer)


class Counter(TypedDict):
    n: int


def loop_graph(checkpointer: Any, *, steps: int, each: Any) -> Any:
    """One node run `steps` times, one superstep each; `each(n)` is called as the node acts."""

    def act(state: Counter) -> dict[str, Any]:
        each(state["n"])
        return {"n": state["n"] + 1}

    graph = StateGraph(Counter)
    graph.add_node("act", act)
    graph.add_edge(START, "act")
    graph.add_conditional_edges("act", lambda s: END if s["n"] >= steps else "act")
    return graph.compile(checkpointer=checkpointer)
