"""The beat schedule: the sweep that re-dispatches runs whose wake-up was lost, and the periodic
housekeeping of memory (TTL purge, projection) and retrieval (embedding what waits, TTL)."""

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
        # Runs refused because this deployment lacked their code, asked to resume once it has it.
        "resume-runs-whose-code-is-back": {
            "task": "workers.tasks.resume_runs_whose_code_is_back",
            "schedule": settings.KEEPER_REDISPATCH_INTERVAL,
            "options": {"expires": settings.KEEPER_REDISPATCH_INTERVAL * 2},
        },
        # An answered LangGraph thread whose resume task was lost (the same grace as the runs').
        "resume-lost-langgraph-answers": {
            "task": "workers.tasks.resume_lost_langgraph_answers",
            "schedule": settings.KEEPER_REDISPATCH_INTERVAL,
            "options": {"expires": settings.KEEPER_REDISPATCH_INTERVAL * 2},
        },
        # The webhook outbox: due deliveries and retries (a killed worker's claim comes due again).
        "deliver-webhooks": {
            "task": "workers.tasks.deliver_webhooks",
            "schedule": settings.KEEPER_WEBHOOKS_INTERVAL,
            "options": {"expires": settings.KEEPER_WEBHOOKS_INTERVAL * 2},
        },
        # Workflow schedules: due slots start their runs (once per slot, however many beats run).
        "fire-schedules": {
            "task": "workers.tasks.fire_schedules",
            "schedule": settings.KEEPER_SCHEDULE_INTERVAL,
            "options": {"expires": settings.KEEPER_SCHEDULE_INTERVAL * 2},
        },
        "expire-orphan-forks": {
            "task": "workers.tasks.expire_forks",
            "schedule": 60.0,
            "options": {"expires": 120},
        },
        # Forks cancelled or expired a fork TTL ago: their events, copied conversation and summaries.
        "purge-abandoned-forks": {
            "task": "workers.tasks.purge_abandoned_forks",
            "schedule": 3600.0,
            "options": {"expires": 7200},
        },
        # The monthly partitions (runs/operator/partitions.py) made ahead; months past retention dropped.
        "maintain-partitions": {
            "task": "workers.tasks.maintain_partitions",
            "schedule": 3600.0,
            "options": {"expires": 7200},
        },
        # Workspace snapshots of runs finished a TTL ago.
        "reclaim-workspaces": {
            "task": "workers.tasks.reclaim_workspaces",
            "schedule": 3600.0,
            "options": {"expires": 7200},
        },
        # Stored blobs no row of any kind names, untouched for KEEPER_ARTIFACT_GRACE.
        "reclaim-artifacts": {
            "task": "workers.tasks.reclaim_artifacts",
            "schedule": 3600.0,
            "options": {"expires": 7200},
        },
        "purge-expired-memory": {
            "task": "workers.tasks.purge_expired_memory",
            "schedule": 300.0,
            "options": {"expires": 600},
        },
        # Claims whose source event was redacted or rewound away, or whose document changed.
        "follow-memory-sources": {
            "task": "workers.tasks.follow_memory_sources",
            "schedule": 300.0,
            "options": {"expires": 600},
        },
        "project-all-memory": {
            "task": "workers.tasks.project_all_memory",
            "schedule": 300.0,
            "options": {"expires": 600},
        },
        "embed-pending-documents": {
            "task": "workers.tasks.embed_pending_documents",
            "schedule": settings.KEEPER_RETRIEVAL_SWEEP_INTERVAL,
            "options": {"expires": settings.KEEPER_RETRIEVAL_SWEEP_INTERVAL * 2},
        },
        "expire-retrieval-index": {
            "task": "workers.tasks.expire_retrieval_index",
            "schedule": 3600.0,
            "options": {"expires": 7200},
        },
    }
