"""Operations endpoints outside the API: liveness, readiness and Prometheus metrics."""

from django.urls import path  # noqa: F401

urlpatterns: list = []  # type: ignore[type-arg]
