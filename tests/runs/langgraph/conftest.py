"""LangGraph tests need the `langgraph` extra; without it they skip and say how to install it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="the langgraph extra is not installed: pip install -e '.[langgraph]' (make test installs it)",
)


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a thread of its own: the browser tests' Playwright (sync API) keeps an event
    loop running in the test process's main thread, where asyncio.run and async_to_sync refuse to run."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
