"""The compliance screens' URLs (names are used in the "console" namespace)."""

from django.urls import path  # noqa: F401

urlpatterns: list = []  # type: ignore[type-arg]
