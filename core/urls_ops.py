"""Operations endpoints outside the API: liveness, readiness and Prometheus metrics (no login)."""

from django.urls import path

from core.health import healthz, readyz
from core.metrics import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]
