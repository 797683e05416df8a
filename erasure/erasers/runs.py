"""The runs eraser: what the runs app keeps about a subject, found and erased.

The subject's runs are the runs whose `subject` is the subject and every fork or rewind below them
(parent_run_id). In them every string that holds the subject's id or a text the request covers is
replaced by "[erased]": run state and result, every event's payload and state copy, approvals and
operations; conversation text is dropped from the events (a digest stays); client message ids and
idempotency keys that carry the id become keyed pseudonyms; `subject` becomes `erased:<subject
digest>`. Summaries, Redis windows and stored blobs only these runs refer to are deleted. Who
acted, decided or holds a run, where that names the subject, is keyed in every run of the tenant.
How one run is redacted is erasure/erasers/run_redaction.py; its places, erasure/erasers/runs_places.py.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from uuid import UUID

import redis
from django.db import connection

from core.artifacts import artifact_digests_in, artifacts_referenced
from core.artifacts.reclaim import artifacts_erase
from core.tenancy import tenant_scope
from erasure.erasers import run_redaction, runs_places
from erasure.matching import CODE, Scope, free_text_value, like_pattern
from erasure.places import Place
from erasure.redactor import Redactor
from erasure.registry import Eraser, Free
from runs.conversations.erasure import ERASED, subject_session_keys
from runs.conversations.sessions import redis_client
from runs.engine.selectors import subject_run_ids
from runs.kernel.models import AgentEvent, AgentRun, Approval, Summary

logger = logging.getLogger(__name__)

# Where people and customers write free text; these strings are what the request covers.
FREE_TEXT_KEYS = frozenset({"content", "preview", "arguments", "reason", "note"})


def _free_texts(value: Any, under_key: bool = False, *, codes: bool = True) -> list[str]:
    """The texts under free-text keys; codes=False leaves out machine codes (event payloads say why
    a run stopped with a code, which is nobody's personal data). Iterative: a hostile state may be
    nested deeper than Python recurses."""
    found: list[str] = []
    stack: list[tuple[Any, bool]] = [(value, under_key)]
    while stack:
        item, under = stack.pop()
        if isinstance(item, str):
            text = under and free_text_value(item) and item != ERASED
            if text and (codes or not CODE.fullmatch(item)):
                found.append(item)
        elif isinstance(item, list):
            stack.extend((v, under) for v in reversed(item))
        elif isinstance(item, dict):
            stack.extend((v, under or k in FREE_TEXT_KEYS) for k, v in reversed(list(item.items())))
    return found


# An e-mail address anywhere in a string (erasure.matching.EMAIL is the whole-value test).
_EMAIL_IN = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _emails(value: Any) -> set[str]:
    """The e-mail addresses in a value's strings and keys, iteratively, at any key: in the subject's
    own runs an address under `contact` or `email` is theirs as much as one in a message."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.update(_EMAIL_IN.findall(item))
        elif isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(k for k in item if isinstance(k, str))
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _shared_addresses(*, tenant_id: UUID, run_ids: list[UUID], addresses: set[str]) -> set[str]:
    """The addresses some run outside the request holds too: a workflow's own sender or support
    address (noreply@...) is nobody's personal data, and searched as the subject's it would keep every
    receipt from being clean. (The subject's address in another customer's run is that run's.)"""
    shared: set[str] = set()
    with connection.cursor() as cursor:
        for address in sorted(addresses):
            cursor.execute(
                "SELECT 1 FROM agent_runs WHERE tenant_id = %s AND NOT (run_id = ANY(%s))"
                " AND (state::text ILIKE %s OR coalesce(result::text, '') ILIKE %s) LIMIT 1",
                [tenant_id, list(run_ids), like_pattern(address), like_pattern(address)],
            )
            if cursor.fetchone() is not None:
                shared.add(address)
    return shared


class RunsEraser(Eraser):
    name = "runs"

    def places(self) -> list[Place]:
        return runs_places.places()

    def free(self) -> list[Free]:
        return runs_places.declared_free()

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        # Runs an interrupted erasure already marked are the subject's too: a retry finishes them.
        with tenant_scope(tenant_id):
            run_ids = subject_run_ids(
                tenant_id=tenant_id, subject_id=subject_id, subject_digest=subject_digest
            )
            texts: set[str] = set()
            addresses: set[str] = set()
            digests: set[str] = set()
            keys: set[bytes] = set(subject_session_keys(tenant_id=tenant_id, subject_id=subject_id))
            for run in AgentRun.objects.filter(run_id__in=run_ids):
                texts.update(_free_texts(run.state))
                texts.update(_free_texts(run.result))
                addresses |= _emails(run.state) | _emails(run.result)
                digests.update(artifact_digests_in([run.state, run.result]))
                keys.update(redis_client().scan_iter(match=f"session:{tenant_id}:*:{run.run_id}", count=500))
            for payload, state in AgentEvent.objects.filter(run_id__in=run_ids).values_list(
                "payload", "state"
            ):
                texts.update(_free_texts(payload, codes=False) + _free_texts(state))
                addresses |= _emails(payload) | _emails(state)
                digests.update(artifact_digests_in([payload, state]))
            approvals = Approval.objects.filter(run_id__in=run_ids).values_list(
                "request", "note", "decided_by"
            )
            for request, note, decided_by in approvals:
                texts.update(_free_texts(request))
                # A person's note may speak of the subject; Keeper's own (the run closed it, a policy
                # approved it) is the same sentence in every tenant's runs, nobody's personal data.
                if decided_by != "keeper" and not decided_by.startswith("policy:"):
                    texts.update(_free_texts({"note": note}))
                addresses |= _emails(request)
            # Every address is erased in the subject's own runs; one that another customer's run holds
            # too (a cc, a workflow's noreply sender) is not searched elsewhere, where it is theirs.
            common = (
                _shared_addresses(tenant_id=tenant_id, run_ids=list(run_ids), addresses=addresses)
                if addresses
                else set()
            )
            texts |= addresses - common
        # Stored by content digest: a blob another run (or anything else of the tenant) also refers to
        # is theirs too, and stays.
        shared = artifacts_referenced(tenant_id=tenant_id, digests=digests, except_runs=run_ids)
        return Scope(
            tenant_id=tenant_id,
            subject_id=subject_id,
            run_ids=run_ids,
            values=tuple(sorted(texts)),
            own_values=tuple(sorted(common)),
            session_keys=tuple(sorted(keys)),
            artifact_digests=tuple(sorted(digests - shared)),
        )

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        run_redaction.runs_stop(scope, request_id)
        redact = Redactor(scope.subject_id, (*scope.values, *scope.own_values))
        counts = dict.fromkeys(
            ("runs_redacted", "events_redacted", "actors_keyed", "approvals_redacted", "operations_redacted"),
            0,
        )
        for run_id in scope.run_ids:
            for key, n in run_redaction.run_erase(
                run_id=run_id,
                scope=scope,
                redact=redact,
                request_id=request_id,
                subject=f"erased:{subject_digest}",
            ).items():
                counts[key] += n
        for key, n in run_redaction.names_key(scope, redact).items():
            counts[key] = counts.get(key, 0) + n
        with tenant_scope(scope.tenant_id):
            counts["summaries"], _ = Summary.objects.filter(run_id__in=scope.run_ids).delete()
        existing = [k for k in scope.session_keys if redis_client().exists(k)]
        counts["redis_session_windows"] = redis_client().delete(*existing) if existing else 0
        if counts["redis_session_windows"]:
            counts["redis_snapshots_rewritten"] = _redis_snapshots_rewrite()
        counts["artifacts"] = artifacts_erase(
            tenant_id=scope.tenant_id, digests=scope.artifact_digests, except_runs=scope.run_ids
        )
        return counts


def _redis_snapshots_rewrite() -> int:
    """Ask Redis to write its snapshots again (RDB, and the AOF when it keeps one): a deleted key
    stays in them on disk until then. How many it was asked to write; 0 when it keeps none or refuses
    (a managed Redis may not take these commands: its own schedule rewrites them)."""
    client = redis_client()
    asked = 0
    try:
        if client.info("persistence").get("aof_enabled"):
            client.bgrewriteaof()
            asked += 1
        if client.config_get("save").get("save"):
            client.bgsave(schedule=True)  # after a save already running, not refused by it
            asked += 1
    except redis.RedisError as exc:
        logger.warning("erasure: Redis did not take the snapshot rewrite (%s); its own schedule will", exc)
    return asked
