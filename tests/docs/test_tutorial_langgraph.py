"""docs/tutorials/langgraph.md's code, run as written: its graph's thread becomes a Keeper run of the
tenant, about the subject it names, with the graph's state in Keeper's checkpoints."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from core.processes import ROOT
from runs.kernel.models import AgentRun
from runs.langgraph.store import THREAD_REASON

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = ROOT / "docs" / "tutorials" / "langgraph.md"


def test_the_tutorials_graph_keeps_its_thread_as_a_keeper_run(tenant) -> None:
    [first, *_] = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(first, str(PAGE), "exec"), {"__name__": "tutorial"})
    assert "We are looking into it: Order A-1001 arrived broken" in printed.getvalue()
    run = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:ticket-42")
    assert (run.workflow_name, run.status, run.suspend_reason, run.subject) == (
        "langgraph",
        "suspended",
        THREAD_REASON,
        "cust-100",
    )
