"""Keeper's project package: settings, URLs, the Celery wiring and the embedded services."""

from workers.celery import app as celery_app

__all__ = ["celery_app"]
