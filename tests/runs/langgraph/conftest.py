"""LangGraph tests need the `langgraph` extra; without it they skip and say how to install it."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="the langgraph extra is not installed: pip install -e '.[langgraph]' (make test installs it)",
)
