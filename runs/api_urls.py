"""The runs API: runs, conversations, approvals and operations under /api/v1/."""

from django.urls import path

from runs import (
    api,
    api_conversation,
    api_evaluation,
    api_external_workflows,
    api_langgraph,
    api_merges,
    api_schedules,
    api_side_effects,
    api_signals,
    api_webhooks,
    api_worker_operations,
    api_workers,
)

_W = "workers/runs/<uuid:run_id>/"

urlpatterns = [
    path("runs/<uuid:run_id>/replay", api_evaluation.RunReplayApi.as_view(), name="api-run-replay"),
    path(
        "runs/<uuid:run_id>/replay-comparison",
        api_evaluation.RunReplayComparisonApi.as_view(),
        name="api-run-replay-comparison",
    ),
    path("eval-sets/", api_evaluation.EvalSetListApi.as_view(), name="api-eval-sets"),
    path("eval-sets/<uuid:set_id>/", api_evaluation.EvalSetDetailApi.as_view(), name="api-eval-set"),
    path("eval-sets/<uuid:set_id>/runs", api_evaluation.EvalSetRunApi.as_view(), name="api-eval-set-runs"),
    path(
        "eval-sets/<uuid:set_id>/rounds", api_evaluation.EvalSetRoundApi.as_view(), name="api-eval-set-rounds"
    ),
    path("eval-rounds/<uuid:round_id>/", api_evaluation.EvalRoundApi.as_view(), name="api-eval-round"),
    path("webhooks/", api_webhooks.WebhookListApi.as_view(), name="api-webhooks"),
    path("webhooks/<uuid:webhook_id>", api_webhooks.WebhookDetailApi.as_view(), name="api-webhook-detail"),
    path(
        "workflows/external/",
        api_external_workflows.ExternalWorkflowApi.as_view(),
        name="api-external-workflows",
    ),
    path("workflows/", api_schedules.WorkflowListApi.as_view(), name="api-workflows"),
    path("schedules/", api_schedules.ScheduleListApi.as_view(), name="api-schedules"),
    path("schedules/<uuid:schedule_id>/", api_schedules.ScheduleDetailApi.as_view(), name="api-schedule"),
    path("workers/claim", api_workers.WorkerClaimApi.as_view(), name="api-worker-claim"),
    path(_W + "commit", api_workers.WorkerCommitApi.as_view(), name="api-worker-commit"),
    path(_W + "heartbeat", api_workers.WorkerHeartbeatApi.as_view(), name="api-worker-heartbeat"),
    path(_W + "release", api_workers.WorkerReleaseApi.as_view(), name="api-worker-release"),
    path(_W + "lookups", api_workers.WorkerLookupsApi.as_view(), name="api-worker-lookups"),
    path(_W + "approval", api_worker_operations.WorkerApprovalApi.as_view(), name="api-worker-approval"),
    path(
        _W + "operations/prepare",
        api_worker_operations.WorkerOperationPrepareApi.as_view(),
        name="api-worker-op-prepare",
    ),
    path(
        _W + "operations/<str:operation_id>/started",
        api_worker_operations.WorkerOperationStartedApi.as_view(),
        name="api-worker-op-started",
    ),
    path(
        _W + "operations/<str:operation_id>/outcome",
        api_worker_operations.WorkerOperationOutcomeApi.as_view(),
        name="api-worker-op-outcome",
    ),
    path("runs/", api.RunStartApi.as_view(), name="api-run-start"),
    path("runs/<uuid:run_id>/", api.RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<uuid:run_id>/events/", api.RunEventsApi.as_view(), name="api-run-events"),
    path("runs/<uuid:run_id>/cancel", api.RunCancelApi.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/resume", api.RunResumeApi.as_view(), name="api-run-resume"),
    path("runs/<uuid:run_id>/accept-state", api.RunAcceptStateApi.as_view(), name="api-run-accept-state"),
    path("runs/<uuid:run_id>/fork", api.RunForkApi.as_view(), name="api-run-fork"),
    path("runs/<uuid:run_id>/rewind", api.RunRewindApi.as_view(), name="api-run-rewind"),
    path("runs/<uuid:run_id>/merge", api_merges.RunMergeApi.as_view(), name="api-run-merge"),
    path(
        "runs/<uuid:run_id>/merges/<uuid:merge_id>",
        api_merges.RunMergeDetailApi.as_view(),
        name="api-run-merge-detail",
    ),
    path(
        "runs/<uuid:run_id>/merges/<uuid:merge_id>/resolve",
        api_merges.RunMergeResolveApi.as_view(),
        name="api-run-merge-resolve",
    ),
    path(
        "runs/<uuid:run_id>/merges/<uuid:merge_id>/abandon",
        api_merges.RunMergeAbandonApi.as_view(),
        name="api-run-merge-abandon",
    ),
    path(
        "runs/<uuid:run_id>/operations/",
        api_side_effects.RunOperationsApi.as_view(),
        name="api-run-operations",
    ),
    path(
        "runs/<uuid:run_id>/langgraph/answer",
        api_langgraph.LangGraphAnswerApi.as_view(),
        name="api-run-langgraph-answer",
    ),
    path("runs/<uuid:run_id>/messages/", api_conversation.RunMessagesApi.as_view(), name="api-run-messages"),
    path("runs/<uuid:run_id>/session/", api_conversation.RunSessionApi.as_view(), name="api-run-session"),
    path("runs/<uuid:run_id>/context/", api_conversation.RunContextApi.as_view(), name="api-run-context"),
    path(
        "runs/<uuid:run_id>/procedures/learn",
        api_conversation.RunProceduresLearnApi.as_view(),
        name="api-run-procedures-learn",
    ),
    path("runs/<uuid:run_id>/signals/<str:name>", api_signals.RunSignalApi.as_view(), name="api-run-signal"),
    path("runs/<uuid:run_id>/queries/<str:name>", api_signals.RunQueryApi.as_view(), name="api-run-query"),
    path("approvals/", api_side_effects.ApprovalListApi.as_view(), name="api-approvals"),
    path(
        "approvals/<uuid:approval_id>/approve",
        api_side_effects.ApprovalApproveApi.as_view(),
        name="api-approve",
    ),
    path(
        "approvals/<uuid:approval_id>/reject", api_side_effects.ApprovalRejectApi.as_view(), name="api-reject"
    ),
    path(
        "operations/<int:pk>/reconcile",
        api_side_effects.OperationReconcileApi.as_view(),
        name="api-reconcile",
    ),
    path(
        "operations/<int:pk>/correct-reconciliation",
        api_side_effects.OperationCorrectApi.as_view(),
        name="api-correct-reconciliation",
    ),
]
