"""What a run's workflow declares that a person can use from the run page: its signals and queries."""

from __future__ import annotations

from runs.authoring import authored
from runs.engine.registry import registry
from runs.kernel.errors import UnknownWorkflow
from runs.kernel.models import AgentRun


def run_signals_and_queries(run: AgentRun) -> tuple[list[str], list[str]]:
    """The signals the run's workflow accepts and the queries it declares (none when its version is
    not known here)."""
    definition = authored(run.workflow_name, run.workflow_version)
    if definition is not None:
        return sorted(definition.signal_names), sorted(definition.query_names())
    try:
        return sorted(registry.get(run.workflow_name, run.workflow_version).signals), []
    except UnknownWorkflow:
        return [], []
