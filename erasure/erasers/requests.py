"""Erasure's own table: a request keeps the subject's id and what it searched for until it is clean."""

from __future__ import annotations

from django.db.models import Q

from erasure.matching import Scope
from erasure.models import ErasureRequest, ErasureStatus
from erasure.places import Place
from erasure.registry import Eraser, Free, free


def _completed_still_holding(scope: Scope) -> int:
    # A request in flight (or failed, to be retried) keeps the id it works on and what it searched
    # for; a completed one never.
    return (
        ErasureRequest.objects.filter(status=ErasureStatus.COMPLETED)
        .filter(Q(subject_id=scope.subject_id) | ~Q(searched=[]))
        .count()
    )


class ErasureRequests(Eraser):
    """Nothing to erase ahead of the receipt: the service clears the request (and the subject's
    earlier failed ones) in the transaction that records a clean receipt."""

    name = "erasure_requests"
    erases = False

    def places(self) -> list[Place]:
        return [
            Place(
                name="erasure_requests.subject_id",
                what="erasure_requests.subject_id and .searched (cleared once clean)",
                erased_by=self.name,
                count=_completed_still_holding,
                columns=(("erasure_requests", "subject_id"), ("erasure_requests", "searched")),
            )
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "erasure_requests",
                "digests, counts, statuses and who asked (a staff user or an API key)",
                "subject_digest",
                "requested_by",
                "status",
                "progress",
                "receipt",
            ),
            free(
                "erasure_requests",
                "a failed erasure's error in Keeper's words, the names and counts of places left "
                "behind, and a store's error message with the subject's id replaced",
                "error",
            ),
        ]
