"""The support screens' URLs (names are used in the "console" namespace)."""

from django.urls import path

from console.views import support, support_operations

urlpatterns = [
    path("support/", support.support_inbox, name="support_inbox"),
    path("support/approvals/<uuid:approval_id>/", support.support_approval, name="support_approval"),
    path(
        "support/approvals/<uuid:approval_id>/approve/",
        support.support_approval_approve,
        name="support_approval_approve",
    ),
    path(
        "support/approvals/<uuid:approval_id>/reject/",
        support.support_approval_reject,
        name="support_approval_reject",
    ),
    path("support/operations/<int:pk>/", support_operations.support_operation, name="support_operation"),
    path(
        "support/operations/<int:pk>/lookup/",
        support_operations.support_operation_lookup,
        name="support_operation_lookup",
    ),
    path(
        "support/operations/<int:pk>/reconcile/",
        support_operations.support_operation_reconcile,
        name="support_operation_reconcile",
    ),
    path(
        "support/operations/<int:pk>/correct/",
        support_operations.support_operation_correct,
        name="support_operation_correct",
    ),
    path("support/runs/<uuid:run_id>/", support.support_run, name="support_run"),
    path("support/runs/<uuid:run_id>/resume/", support.support_run_resume, name="support_run_resume"),
    path("support/runs/<uuid:run_id>/cancel/", support.support_run_cancel, name="support_run_cancel"),
    path(
        "support/runs/<uuid:run_id>/langgraph/answer/",
        support.support_langgraph_answer,
        name="support_langgraph_answer",
    ),
]
