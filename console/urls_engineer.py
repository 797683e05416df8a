"""The engineer screens' URLs (names are used in the "console" namespace)."""

from django.urls import path

from console.views import (
    charts,
    engineer,
    engineer_bulk,
    engineer_evaluations,
    engineer_history,
    engineer_langgraph,
    engineer_live,
    engineer_memory,
    engineer_merges,
    engineer_queue,
    engineer_schedules,
    engineer_signals,
    engineer_webhooks,
    engineer_workspace,
)

urlpatterns = [
    path("runs/", engineer.run_list, name="run_list"),
    path("runs/bulk/", engineer_bulk.bulk, name="run_bulk"),
    path("runs/<uuid:run_id>/", engineer.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/live/", engineer_live.run_live, name="run_live"),
    path("runs/<uuid:run_id>/state/", engineer.run_state, name="run_state"),
    path("runs/<uuid:run_id>/diff/", engineer.run_diff, name="run_diff"),
    path(
        "runs/<uuid:run_id>/summaries/<uuid:summary_id>/check/",
        engineer.summary_check,
        name="run_summary_check",
    ),
    path("runs/<uuid:run_id>/resume/", engineer_bulk.run_action, {"action": "resume"}, name="run_resume"),
    path("runs/<uuid:run_id>/cancel/", engineer_bulk.run_action, {"action": "cancel"}, name="run_cancel"),
    path(
        "runs/<uuid:run_id>/redispatch/",
        engineer_bulk.run_action,
        {"action": "redispatch"},
        name="run_redispatch",
    ),
    path("runs/<uuid:run_id>/accept-state/", engineer_bulk.run_accept_state_view, name="run_accept_state"),
    path("runs/<uuid:run_id>/signal/", engineer_signals.run_signal, name="run_signal"),
    path("runs/<uuid:run_id>/query/", engineer_signals.run_query, name="run_query"),
    path("runs/<uuid:run_id>/fork/", engineer_bulk.run_fork_view, name="run_fork"),
    path("runs/<uuid:run_id>/rewind/", engineer_bulk.run_fork_view, {"rewind": True}, name="run_rewind"),
    path("runs/<uuid:run_id>/merge/", engineer_merges.run_merge_view, name="run_merge"),
    path("runs/<uuid:run_id>/merges/<uuid:merge_id>/", engineer_merges.run_merge_page, name="run_merge_page"),
    path(
        "runs/<uuid:run_id>/merges/<uuid:merge_id>/abandon/",
        engineer_merges.run_merge_abandon,
        name="run_merge_abandon",
    ),
    path("runs/<uuid:run_id>/langgraph/", engineer_langgraph.run_langgraph, name="run_langgraph"),
    path(
        "runs/<uuid:run_id>/langgraph/fork/", engineer_langgraph.run_langgraph_fork, name="run_langgraph_fork"
    ),
    path("queue/", engineer_queue.queue_health, name="queue_health"),
    path("workers/", engineer_queue.worker_list, name="worker_list"),
    path("memory/", engineer_memory.memory_view, name="memory_view"),
    path("workers/<str:name>/", engineer_queue.worker_detail, name="worker_detail"),
    # charts, a run's history file and its workspace
    path("charts/", charts.charts, name="charts"),
    path(
        "runs/<uuid:run_id>/history.json", engineer_history.run_history_download, name="run_history_download"
    ),
    path("runs/<uuid:run_id>/workspace/", engineer_workspace.run_workspace, name="run_workspace"),
]

urlpatterns += [
    path("evaluations/", engineer_evaluations.evaluation_list, name="evaluation_list"),
    path("evaluations/new/", engineer_evaluations.evaluation_set_create, name="evaluation_set_create"),
    path(
        "evaluations/<uuid:set_id>/add/", engineer_evaluations.evaluation_set_add, name="evaluation_set_add"
    ),
    path(
        "evaluations/<uuid:set_id>/run/", engineer_evaluations.evaluation_set_run, name="evaluation_set_run"
    ),
    path(
        "evaluations/rounds/<uuid:round_id>/", engineer_evaluations.evaluation_round, name="evaluation_round"
    ),
]

urlpatterns += [
    path("webhooks/", engineer_webhooks.webhook_list, name="webhook_list"),
    path("webhooks/subscribe/", engineer_webhooks.webhook_create, name="webhook_create"),
    path("webhooks/<uuid:webhook_id>/delete/", engineer_webhooks.webhook_delete, name="webhook_delete"),
]

# schedules and workflow versions
urlpatterns += [
    path("schedules/", engineer_schedules.schedule_list, name="schedule_list"),
    path("schedules/new/", engineer_schedules.schedule_new, name="schedule_new"),
    path("schedules/<uuid:schedule_id>/edit/", engineer_schedules.schedule_edit, name="schedule_edit"),
    *(
        path(
            f"schedules/<uuid:schedule_id>/{action}/",
            engineer_schedules.schedule_action,
            {"action": action},
            name=f"schedule_{action}",
        )
        for action in ("pause", "resume", "delete")
    ),
    path("workflows/", engineer_schedules.workflow_list, name="workflow_list"),
]
