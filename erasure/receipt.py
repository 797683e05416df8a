"""The receipt of an erasure, and what a request that did not finish says, in plain words."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.utils import timezone

from erasure.matching import Scope
from erasure.places import LOCATED, Place

REMANENCE = (
    "Physical remanence is outside an application's reach: PostgreSQL keeps dead row versions until VACUUM "
    "and sampled values in its planner statistics until ANALYZE, and WAL, replicas and backups keep old pages "
    "until they expire, as Redis snapshots (RDB/AOF) keep deleted keys until the next rewrite (asked for "
    "after deleting session windows; a managed Redis may only rewrite on its schedule); the operator "
    "runs VACUUM ANALYZE on the erased tables and lets backups age out "
    "within the retention period the erasure policy promises."
)


def receipt_build(
    *,
    request_id: UUID,
    tenant_id: UUID,
    subject_digest: str,
    scope: Scope,
    counts: dict[str, int],
    scanned: list[Place],
    free: list[Place],
    before: dict[str, int],
    after: dict[str, int],
    held: dict[str, list[str]],
) -> dict[str, Any]:
    """Counts per store, every place before and after (a declared-free column only where the scan
    found the subject there), the runs still holding data, and what to do about what is left."""
    clean = not any(after.values())
    free_names = {p.name for p in free}
    listed = [p for p in scanned if p.name not in free_names or before[p.name] or after[p.name]]
    return {
        "request_id": str(request_id),
        "tenant_id": str(tenant_id),
        "subject_digest": subject_digest,
        "counts": counts,
        "final_scan": {p.name: after[p.name] for p in listed},
        "places": [
            {
                "place": p.name,
                "what": p.what,
                "erased_by": p.erased_by,
                "before": before[p.name],
                "after": after[p.name],
                **({"runs": held[p.name]} if held.get(p.name) else {}),
                # The registry said this column holds no one's data and the scan found the subject
                # there: the registry is wrong (the tests hold the two in agreement).
                **({"declared_free": True} if p.name in free_names else {}),
                **({"what_to_do": p.what_to_do()} if after[p.name] else {}),
            }
            for p in listed
        ],
        "searched": {"identifiers": 1, "values": len(scope.values), "runs": len(scope.run_ids)},
        "clean": clean,
        "remanence": REMANENCE,
        "completed_at": timezone.now().isoformat(),
    }


def retry_in_words(request_id: UUID) -> str:
    return (
        f"Then retry this request (Retry on its page in the console, or POST "
        f"/api/v1/erasure-requests/{request_id}/retry): a retry picks up where this attempt stopped."
    )


def left_in_words(
    *,
    left: dict[str, int],
    held: dict[str, list[str]],
    places: dict[str, Place],
    kept: list[str],
    request_id: UUID,
) -> str:
    """What is left and what to do about it, in plain words (the request's error). `kept`: the erasers
    that wait on purpose until nothing else holds the subject's data (their memory)."""
    parts = [
        f"Not finished: the subject's data is still in {len(left)} place{'s' if len(left) != 1 else ''}."
    ]
    by_remedy: dict[str, list[str]] = {}  # places with the same remedy are said once
    runs: dict[str, list[str]] = {}
    for name, n in sorted(left.items()):
        place = places.get(name)
        todo = place.what_to_do() if place is not None else "retry"
        by_remedy.setdefault(todo, []).append(f"{name} ({n} row{'s' if n != 1 else ''})")
        runs.setdefault(todo, [])
        runs[todo] += [r for r in held.get(name, []) if r not in runs[todo]]
    for todo, names in by_remedy.items():
        where = runs[todo]
        more = " and more" if len(where) > LOCATED else ""
        named = f", in runs {', '.join(where[:LOCATED])}{more}" if where else ""
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        parts.append(f"{listed}{named}: {todo}.")
    if kept:
        parts.append(
            f"The subject's {' and '.join(kept)} is kept until nothing else holds their data, so that a "
            "retry searches for it again."
        )
    parts.append(retry_in_words(request_id))
    return " ".join(parts)


def failed_in_words(step: str, exc: Exception, request_id: UUID, subject: str) -> str:
    """An erasure stopped by an error: where, the error, and what to do. A database error can quote
    a row's values: the subject's id in it is replaced."""
    said = str(exc)[:1500].replace(subject, "[the subject]") if subject else str(exc)[:1500]
    return (
        f"Stopped by an error in the {step} step: {type(exc).__name__}: {said}. What was "
        f"erased stays erased, and the request keeps what it searched for. Fix the cause (a store that "
        f"was away, a file that could not be removed). {retry_in_words(request_id)}"
    )
