"""The beat schedule: the sweep that re-dispatches runs whose wake-up was lost."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def beat_schedule() -> dict[str, dict[str, Any]]:
    return {
        "redispatch-runs": {
            "task": "workers.tasks.redispatch_runs",
            "schedule": settings.KEEPER_REDISPATCH_INTERVAL,
            "options": {"expires": settings.KEEPER_REDISPATCH_INTERVAL * 2},
        },
        "expire-orphan-forks": {
            "task": "workers.tasks.expire_forks",
            "schedule": 60.0,
            "options": {"expires": 120},
        },
    }
