from django.urls import path

from erasure import api

urlpatterns = [
    path("erasure-requests/", api.ErasureRequestsApi.as_view(), name="api-erasure-requests"),
    path(
        "erasure-requests/<uuid:request_id>/",
        api.ErasureRequestDetailApi.as_view(),
        name="api-erasure-request",
    ),
    path(
        "erasure-requests/<uuid:request_id>/retry",
        api.ErasureRequestRetryApi.as_view(),
        name="api-erasure-request-retry",
    ),
]
