"""The module Django loads for the runs app: the run tables live in the kernel (runs/kernel/models.py), the rest beside their code."""

from __future__ import annotations

from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay
from runs.engine.schedule_models import OverlapPolicy, WorkflowSchedule
from runs.engine.workspace_models import MergeStatus, WorkspaceMerge, WorkspaceSnapshot
from runs.external.models import ExternalWorkflow
from runs.kernel.models import (
    AgentEvent,
    AgentRun,
    Approval,
    ApprovalStatus,
    OperationStatus,
    RunStatus,
    Summary,
    SummaryStatus,
    ToolOperation,
)
from runs.langgraph.models import LangGraphBlob, LangGraphCheckpoint, LangGraphWrite
from runs.webhooks.models import WebhookDelivery, WebhookSubscription

__all__ = [
    "AgentEvent",
    "AgentRun",
    "Approval",
    "ExternalWorkflow",
    "LangGraphBlob",
    "LangGraphCheckpoint",
    "LangGraphWrite",
    "ApprovalStatus",
    "EvalRound",
    "EvalSet",
    "EvalSetRun",
    "RunReplay",
    "OperationStatus",
    "RunStatus",
    "Summary",
    "SummaryStatus",
    "ToolOperation",
    "WebhookDelivery",
    "WebhookSubscription",
    "WorkspaceSnapshot",
    "WorkspaceMerge",
    "MergeStatus",
    "OverlapPolicy",
    "WorkflowSchedule",
]
