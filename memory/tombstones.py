"""Tombstones: what an erasure deleted from memory, by keyed digest only, so that replaying old events
or re-running extraction cannot bring a claim back (the erasure package lays them, memory's writes
consult them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from core.digests import json_digest, keyed_digest
from memory.models import Tombstone


def _claim_value(*, subject_id: str, namespace: str, key: str, value: Any) -> dict[str, Any]:
    return {"subject": subject_id, "namespace": namespace, "key": key, "value": value}


def _source_value(*, subject_id: str, run_id: Any, event_seq: Any) -> dict[str, Any]:
    return {"subject": subject_id, "run_id": str(run_id), "event_seq": event_seq}


def claim_digest(*, subject_id: str, namespace: str, key: str, value: Any) -> str:
    return keyed_digest(_claim_value(subject_id=subject_id, namespace=namespace, key=key, value=value))


def source_digest(*, subject_id: str, run_id: Any, event_seq: Any) -> str:
    return keyed_digest(_source_value(subject_id=subject_id, run_id=run_id, event_seq=event_seq))


def _claim_digests(
    *, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> list[str]:
    values = [_claim_value(subject_id=subject_id, namespace=namespace, key=key, value=value)]
    if provenance.get("run_id") is not None:
        values.append(
            _source_value(
                subject_id=subject_id, run_id=provenance.get("run_id"), event_seq=provenance.get("event_seq")
            )
        )
    # Keyed digests, and the unkeyed ones of tombstones laid before the key (they must keep refusing).
    return [*(keyed_digest(v) for v in values), *(json_digest(v) for v in values)]


def tombstoned(
    *, tenant_id: UUID, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> bool:
    """Whether this claim, or the event it comes from, was erased (must run inside the tenant scope).

    A claim with no run (an operator's entry, a store used outside a graph) has no source event: its
    source digest would be the same for every such claim about the subject, so only the claim counts
    (an older erasure may have left that digest; it refuses nothing)."""
    return bool(
        tombstoned_among(
            tenant_id=tenant_id, subject_id=subject_id, claims=[(namespace, key, value, provenance)]
        )
    )


def tombstoned_among(
    *, tenant_id: UUID, subject_id: str, claims: Sequence[tuple[str, str, Any, dict[str, Any]]]
) -> list[int]:
    """The positions of the (namespace, key, value, provenance) claims `tombstoned` refuses, found
    with one query (inside the tenant scope)."""
    digests = [
        _claim_digests(subject_id=subject_id, namespace=n, key=k, value=v, provenance=p)
        for n, k, v, p in claims
    ]
    wanted = {d for ds in digests for d in ds}
    if not wanted:
        return []
    found = set(
        Tombstone.objects.filter(tenant_id=tenant_id, digest__in=wanted).values_list("digest", flat=True)
    )
    return [i for i, ds in enumerate(digests) if found.intersection(ds)]
