from django.urls import path

from runs import api

urlpatterns = [
    path("runs/", api.RunStartApi.as_view(), name="api-run-start"),
    path("runs/<uuid:run_id>/", api.RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<uuid:run_id>/events/", api.RunEventsApi.as_view(), name="api-run-events"),
    path("runs/<uuid:run_id>/cancel", api.RunCancelApi.as_view(), name="api-run-cancel"),
    path("runs/<uuid:run_id>/resume", api.RunResumeApi.as_view(), name="api-run-resume"),
]
