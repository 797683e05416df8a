"""Keys that say whether a live page changed: the pages poll with the key they show, and the server
answers 204 (htmx swaps nothing) while it is the same, so unchanged parts are not redrawn."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from django.utils.dateformat import format as date_format

POLL_SECONDS = 3  # how often an open run list or run page asks whether its runs changed


def run_live_key(run: Any) -> str:
    """Changes with every committed event and every change of the run's row (status, lease, wake-up)."""
    return f"{run.state_revision}-{date_format(run.updated_at, 'U.u')}"


def run_actions_key(run: Any) -> str:
    """Changes when the run page's actions change (status, a resume request, being superseded)."""
    return f"{run.status}.{'r' if run.resume_requested_at else ''}.{'s' if run.superseded_by_id else ''}"


def rows_live_key(runs: Iterable[Any]) -> str:
    """One key for a page of runs: which runs, in which order, each at which update. The revision
    counts too: a run stepping on in one status moves updated_at at most once a second."""
    digest = hashlib.sha256()
    for run in runs:
        digest.update(
            f"{run.run_id}|{run.status}|{run.state_revision}|{run.lease_owner}|{run.updated_at.isoformat()}\n".encode()
        )
    return digest.hexdigest()[:20]
