"""Tombstones: what an erasure deleted from memory, by keyed digest only, so that replaying old events
or re-running extraction cannot bring a claim back (the erasure package lays them, memory's writes
consult them)."""

from __future__ import annotations

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


def tombstoned(
    *, tenant_id: UUID, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> bool:
    """Whether this claim, or the event it comes from, was erased (must run inside the tenant scope).

    A claim with no run (an operator's entry, a store used outside a graph) has no source event: its
    source digest would be the same for every such claim about the subject, so only the claim counts
    (an older erasure may have left that digest; it refuses nothing)."""
    values = [_claim_value(subject_id=subject_id, namespace=namespace, key=key, value=value)]
    if provenance.get("run_id") is not None:
        values.append(
            _source_value(
                subject_id=subject_id, run_id=provenance.get("run_id"), event_seq=provenance.get("event_seq")
            )
        )
    # Keyed digests, and the unkeyed ones of tombstones laid before the key (they must keep refusing).
    digests = [*(keyed_digest(v) for v in values), *(json_digest(v) for v in values)]
    return Tombstone.objects.filter(tenant_id=tenant_id, digest__in=digests).exists()
