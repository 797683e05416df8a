"""LangGraph graphs registered with Keeper by name, so a worker can resume a thread a person answered.

A module listed in KEEPER_WORKFLOW_MODULES calls `graph_register(name=..., builder=...)`; the builder
takes a checkpointer and returns the compiled graph. A builder given as "module:function" is imported
only when a worker resumes the graph, so registering needs no LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

Builder = Callable[..., Any]  # build(checkpointer) or build(checkpointer, store=None)

_GRAPHS: dict[str, Builder | str] = {}


def graph_register(*, name: str, builder: Builder | str) -> None:
    """Register (or replace) the graph `name`; a thread started with KeeperSaver(graph=name) names it."""
    if not name:
        raise ValueError("a graph needs a name")
    if isinstance(builder, str) and ":" not in builder:
        raise ValueError("a builder given by name is 'module:function'")
    _GRAPHS[name] = builder


def graph_get(name: str) -> Builder | None:
    """The builder of the graph `name`, or None if no graph has that name here."""
    builder = _GRAPHS.get(name) if name else None
    if isinstance(builder, str):
        module, _, attr = builder.partition(":")
        builder = getattr(import_module(module), attr)
        _GRAPHS[name] = builder
    return builder


def graph_registered(name: str) -> bool:
    """Whether a worker here can resume the graph `name` (nothing is imported to tell)."""
    return bool(name) and name in _GRAPHS


def graph_names() -> list[str]:
    return sorted(_GRAPHS)
