"""What the runs app keeps about a subject, for erasure: its places, how they are found, and the eraser.

The subject's runs are the runs whose `subject` is the subject and every fork or rewind below them
(parent_run_id). In them every string that holds the subject's id or a text the request covers is
replaced by "[erased]": run state and result, every event's payload and state copy, approvals and
operations; conversation text is dropped from the events (a digest stays); client message ids and
idempotency keys that carry the id become digests; `subject` becomes `erased:<subject digest>`.
Summaries, Redis windows and stored tool results only these runs point to are deleted.

History stays verifiable: each run gets one `subject_erased` event, written with the redacted state
in one fenced statement (the kernel's SubjectErased move), whose payload records per redacted event the digest of its
content before and after; history checks accept a changed event only when it matches that record.

Over 400 lines on purpose: every place the runs app keeps a subject's data (runs, events,
approvals, summaries, session windows, artifacts) is listed and erased in one file, so none is forgotten.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

import redis
from django.db import OperationalError, connection

from core.artifacts import artifact_digests_in, artifacts_referenced
from core.artifacts.reclaim import artifacts_erase, artifacts_left
from core.digests import json_digest, keyed_digest
from core.erasure import (
    CODE,
    IDENTIFIER_SUBSTRING_CHARS,
    MIN_VALUE_CHARS,
    Place,
    Scope,
    column_place,
    erased_id,
    free_register,
    free_text_value,
    id_pattern,
    like_pattern,
    matched_inside,
    place_register,
    value_pattern,
)
from core.tenancy import tenant_scope
from runs.conversations.messages import CONVERSATION_EVENTS
from runs.conversations.sessions import redis_client
from runs.engine.selectors import subject_run_ids
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, OperationStatus, Summary, ToolOperation
from runs.kernel.state import state_encode

logger = logging.getLogger(__name__)

ERASED = "[erased]"
ERASED_EVENT = "subject_erased"
ERASED_DETAIL = (
    "the subject of this run was erased (an erasure request); its text is redacted and the run "
    "cannot continue: start a new run if the customer asks again"
)
TEXT_KEYS = ("content", "preview", "arguments")  # conversation text, dropped from redacted events
# Where people and customers write free text; these strings are what the request covers.
FREE_TEXT_KEYS = frozenset({"content", "preview", "arguments", "reason", "note"})
GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # Redis MATCH pattern characters
DEADLOCK = "40P01"  # deadlock_detected: PostgreSQL rolled this transaction back, the other one goes on


def subject_session_keys(*, tenant_id: UUID, subject_id: str) -> list[bytes]:
    """The Redis window keys of this subject's runs. Glob characters in a subject id are escaped,
    and a key must be this subject's followed by a run id only: erasing "a*" or "a" must never
    touch the windows of "ab" or "a:b"."""
    prefix = f"session:{tenant_id}:{subject_id}:".encode()
    escaped = GLOB_SPECIAL.sub(lambda m: "\\" + m.group(0), subject_id)
    pattern = f"session:{tenant_id}:{escaped}:*"
    return [
        key
        for key in redis_client().scan_iter(match=pattern, count=500)
        if key.startswith(prefix) and b":" not in key[len(prefix) :]
    ]


def redaction_digest(*, payload: Any, state: Any, client_message_id: Any) -> str:
    """The digest of what redaction may change in an event, recorded before and after."""
    return json_digest({"payload": payload, "state": state, "client_message_id": client_message_id})


def redactions_of(events: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, str]]:
    """The redaction records of a history: seq -> {before, after}, from its subject_erased events."""
    records: dict[int, dict[str, str]] = {}
    for event in events:
        if event.get("event_type") == ERASED_EVENT:
            for seq, record in ((event.get("payload") or {}).get("redactions") or {}).items():
                records[int(seq)] = record
    return records


def event_redacted_as_recorded(event: dict[str, Any], records: dict[int, dict[str, str]]) -> bool:
    """Whether this event was changed by an erasure exactly as its record says (and only then)."""
    record = records.get(int(event.get("seq") or 0))
    return record is not None and record.get("after") == redaction_digest(
        payload=event.get("payload"),
        state=event.get("state"),
        client_message_id=event.get("client_message_id"),
    )


class Redactor:
    def __init__(self, subject_id: str, values: tuple[str, ...]):
        # The same rule as the scan (core.erasure.column_place): long texts (and names in scripts
        # without spaces) anywhere inside a string, short ones as whole words, case-insensitively.
        texts = [v for v in values if len(v) >= MIN_VALUE_CHARS]
        self.texts = {v.lower() for v in texts}
        self.needles = [v.lower() for v in texts if matched_inside(v)]
        self.words = value_pattern([v for v in texts if not matched_inside(v)])
        # The id as a whole token ("cust-100" never inside "cust-1000"); a short one as a whole value.
        self.id_token = id_pattern(subject_id) if len(subject_id) >= IDENTIFIER_SUBSTRING_CHARS else None
        self.subject_id = subject_id.lower()

    def hit(self, text: str) -> bool:
        low = text.lower()
        return (
            any(n in low for n in self.needles)
            or (self.words is not None and self.words.search(text) is not None)
            or (self.id_token.search(text) is not None if self.id_token else low == self.subject_id)
        )

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return ERASED if self.hit(value) else value
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            items = [(k, self.ident(v) if k == "client_message_id" else self(v)) for k, v in value.items()]
            gone = {k for k, _ in items if isinstance(k, str) and self.key_hit(k)}
            taken = {k for k, _ in items if k not in gone}
            redacted: dict[str, Any] = {}
            for key, item in items:
                if key in gone:  # "[erased]", or "[erased] 2" ... past every key the object keeps
                    key = next(k for n in range(1, len(items) + 2) if (k := _nth(n)) not in taken)
                    taken.add(key)
                redacted[key] = item
            return redacted
        return value

    def key_hit(self, key: str) -> bool:
        """A key can be the subject's data too ({"Zofia": "sister"}, an object keyed by their id). A
        key that is a machine code ("delivered_at") is the state's shape: only the subject's id, or
        a key that is one of the texts whole ("zofia"), makes it theirs."""
        if not CODE.fullmatch(key):
            return self.hit(key)
        low = key.lower()
        return low in self.texts or (
            self.id_token.search(key) is not None if self.id_token else low == self.subject_id
        )

    def ident(self, value: Any) -> Any:
        return erased_id(value) if isinstance(value, str) and self.hit(value) else self(value)


def _erased_key(key: str | None, run_id: Any, redact: Any) -> str | None:
    """A run's idempotency key as erasure leaves it. A LangGraph thread's stays the thread's own
    (erased_id of the key: its saver finds the erased thread by it and refuses it); any other run's
    becomes its own, so a client that uses the key again after an erasure starts a run that a second
    erasure can erase (found from outside: both became one erased key, and the second erasure failed
    on the key's uniqueness, for good)."""
    if not key:
        return key
    erased = redact.ident(key)
    if erased == key or key.startswith("langgraph:"):
        return erased
    return erased_id(f"{key}\n{run_id}")


def _nth(n: int) -> str:
    """The n-th erased key of an object: "[erased]", "[erased] 2", ..."""
    return ERASED if n == 1 else f"{ERASED} {n}"


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


# An e-mail address anywhere in a string (the scan's core.erasure.EMAIL is the whole-value test).
_EMAIL_IN = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _emails(value: Any) -> set[str]:
    """The e-mail addresses in a value's strings and keys, iteratively, at any key: in the subject's
    own runs an address under `contact` or `email` is theirs as much as one in a message (found from
    outside: a receipt said clean while {"contact": "zofia...@example.org"} stayed in a run's state)."""
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


class RunsEraser:
    name = "runs"

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
                # approved it) is the same sentence in every tenant's runs, nobody's personal data
                # (found from outside on the request's searched texts).
                if decided_by != "keeper" and not decided_by.startswith("policy:"):
                    texts.update(_free_texts({"note": note}))
                addresses |= _emails(request)
            # Every address is erased in the subject's own runs; one that another customer's run holds
            # too (a cc, a workflow's noreply sender) is not searched elsewhere, where it is theirs
            # (found from outside: a single cc kept the address in the subject's own run).
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
        _stop(scope, request_id)
        redact = Redactor(scope.subject_id, (*scope.values, *scope.own_values))
        counts = {"runs_redacted": 0, "events_redacted": 0, "approvals_redacted": 0, "operations_redacted": 0}
        for run_id in scope.run_ids:
            for key, n in _erase_run(
                run_id=run_id,
                scope=scope,
                redact=redact,
                request_id=request_id,
                subject=f"erased:{subject_digest}",
            ).items():
                counts[key] += n
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


def _stop(scope: Scope, request_id: UUID) -> None:
    """Every unfinished run of the request stops first, in one transaction, before any is redacted:
    redacted one after another, the last ones went on processing the subject's data meanwhile, and
    some finished (found from outside: 3 of 10 stepping runs completed during a 70 s erasure)."""
    with tenant_scope(scope.tenant_id):
        active = (
            AgentRun.objects.filter(run_id__in=scope.run_ids, status__in=["running", "suspended"])
            .exclude(suspend_reason=ERASED_EVENT)
            .values_list("run_id", flat=True)
        )
        for run_id in active:
            apply(
                m.StatusChanged(
                    run_id=run_id,
                    from_statuses=("running", "suspended"),
                    to_status="suspended",
                    event_type="run_suspended",
                    actor=f"erasure:{request_id}",
                    payload={"reason": ERASED_EVENT, "erasure_request_id": str(request_id)},
                    suspend_reason=ERASED_EVENT,
                    suspend_detail=ERASED_DETAIL,
                )
            )


# What a LangGraph thread's graph asked a person and what the person answered (runs.langgraph's
# events): all of it is the subject's, a three-letter name or an amount as much as a sentence, so
# each question's value and each answer and note is erased whole, not only the texts found elsewhere
# (which leave out short answers: core.erasure.free_text_value). The interrupts' ids and who answered stay.
LANGGRAPH_ASKED = frozenset({"langgraph_interrupt", "langgraph_interrupt_answered"})


def _langgraph_asked_erased(payload: Any) -> Any:
    if not isinstance(payload, dict):
        return payload
    erased = dict(payload)
    if isinstance(payload.get("interrupts"), list):
        erased["interrupts"] = [
            {**item, "value": ERASED} if isinstance(item, dict) and "value" in item else item
            for item in payload["interrupts"]
        ]
    for key in ("answer", "note"):
        if payload.get(key) not in (None, ""):
            erased[key] = ERASED
    return erased


def _erase_run(
    *, run_id: UUID, scope: Scope, redact: Redactor, request_id: UUID, subject: str
) -> dict[str, int]:
    """Redact one run in one transaction; its new state goes in with the fenced subject_erased event.

    The run's row is locked first: every event is appended with an update of that row, so while the
    transaction reads the log nothing is added to it, and a worker's step (a message, a LangGraph put)
    waits, then finds the run erased and is refused. (Read first and fenced at the end, a run that
    steps every millisecond was always ahead: found from outside, the whole erasure failed.)"""
    for _ in range(20):  # a deadlock with a writer that locked a side row first: read it again
        try:
            with tenant_scope(scope.tenant_id):
                run = AgentRun.objects.select_for_update().get(run_id=run_id)
                changed: list[tuple[int, dict[str, Any]]] = []
                records: dict[str, dict[str, str]] = {}
                for event in AgentEvent.objects.filter(run_id=run_id).order_by("seq"):
                    payload = event.payload
                    if event.event_type in LANGGRAPH_ASKED:
                        payload = _langgraph_asked_erased(payload)
                    if event.event_type in CONVERSATION_EVENTS and "redacted" not in payload:
                        kept = {k: v for k, v in payload.items() if k not in TEXT_KEYS}
                        payload = {
                            **kept,
                            "redacted": True,
                            "text_digest": keyed_digest({k: payload.get(k) for k in TEXT_KEYS}),
                        }
                    new = {
                        "payload": redact(payload),
                        "state": redact(event.state),
                        "client_message_id": redact.ident(event.client_message_id),
                    }
                    old = {
                        "payload": event.payload,
                        "state": event.state,
                        "client_message_id": event.client_message_id,
                    }
                    if new != old:
                        changed.append((event.seq, new))
                        records[str(event.seq)] = {
                            "before": keyed_digest(old),  # of the subject's own text: keyed
                            "after": redaction_digest(**new),
                        }
                state = redact(run.state)
                result = redact(run.result)
                key = _erased_key(run.idempotency_key, run.run_id, redact)
                if (
                    not changed
                    and state == run.state
                    and result == run.result
                    and run.subject == subject
                    and (key == run.idempotency_key)
                ):
                    break  # nothing left: a second erasure changes nothing
                encoded = state_encode(state)
                seq = apply(
                    m.SubjectErased(
                        run_id=run_id,
                        tenant_id=scope.tenant_id,
                        expected_revision=run.state_revision,
                        state=encoded,
                        subject=subject,
                        result=result,
                        idempotency_key=key,
                        detail=ERASED_DETAIL,
                        old_detail=ERASED if redact.hit(run.suspend_detail) else run.suspend_detail,
                        payload={
                            "erasure_request_id": str(request_id),
                            "redactions": records,
                            "state_digest_before": run.state_digest,
                        },
                        actor=f"erasure:{request_id}",
                    )
                )
                if seq is None:
                    continue
                for event_seq, new in changed:
                    apply(m.EventRedacted(run_id, event_seq, new))
                approvals = _redact_rows(
                    Approval.objects.filter(run_id=run_id), redact, ("request", "reasons", "note")
                )
                operations = _redact_operations(run_id, redact)
                return {
                    "runs_redacted": 1,
                    "events_redacted": len(changed),
                    "approvals_redacted": approvals,
                    "operations_redacted": operations,
                }
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK:
                raise
    else:
        raise RuntimeError(f"run {run_id} could not be erased: 20 attempts met a deadlock or a change")
    with tenant_scope(scope.tenant_id):  # the run itself was done before; its side rows may not be
        return {
            "runs_redacted": 0,
            "events_redacted": 0,
            "approvals_redacted": _redact_rows(
                Approval.objects.filter(run_id=run_id), redact, ("request", "reasons", "note")
            ),
            "operations_redacted": _redact_operations(run_id, redact),
        }


# An operation with its outcome, or one never sent (prepared; or confirmed not applied, which puts it
# back to prepared): after the erasure its run never continues, so its key is never sent again
# (found from outside: a refund confirmed not applied on a cancelled run kept its subject's key).
_DECIDED = (OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.PREPARED)


def _redact_operations(run_id: UUID, redact: Redactor) -> int:
    """The run's operations: their result and history redacted, an external ref that holds the
    subject's id or text rewritten as an erased id, and so the key of an operation with its outcome
    (found from outside: an operation keyed note:cust-7781 kept every erasure of cust-7781 from ever
    completing). An operation still in doubt keeps its key: reconciling it sends that key again, and
    another key could apply the side effect twice; the receipt names it until it is reconciled."""
    n = _redact_rows(ToolOperation.objects.filter(run_id=run_id), redact, ("result", "history"))
    for op in ToolOperation.objects.filter(run_id=run_id):
        new: dict[str, Any] = {}
        if op.external_ref and redact.hit(op.external_ref):
            new["external_ref"] = erased_id(op.external_ref)
        if op.status in _DECIDED and redact.hit(op.operation_id):
            new["operation_id"] = erased_id(op.operation_id)
        if new:
            ToolOperation.objects.filter(pk=op.pk).update(**new)
            n += 1
    return n


def _redact_rows(queryset: Any, redact: Redactor, fields: tuple[str, ...]) -> int:
    n = 0
    for row in queryset:
        new = {f: redact(getattr(row, f)) for f in fields}
        if any(new[f] != getattr(row, f) for f in fields):
            type(row).objects.filter(pk=row.pk).update(**new)
            n += 1
    return n


# --- the places the runs app keeps, and the columns that never hold a subject's data -------------

_IN_TENANT = "t.tenant_id = %(tenant)s"
_RUN_IN_TENANT = "t.run_id IN (SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s)"
_MINE = "t.run_id = ANY(%(runs)s::uuid[])"
_OWNER = "(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.run_id)"


def _redis_snapshots_rewrite() -> int:
    """Ask Redis to write its snapshots again (RDB, and the AOF when it keeps one): a deleted key
    stays in them on disk until then (found from outside: the dump still held the erased subject's
    message after a clean receipt). How many it was asked to write; 0 when it keeps none or refuses
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


def _count_session_windows(scope: Scope) -> int:
    keys = set(scope.session_keys) | set(
        subject_session_keys(tenant_id=scope.tenant_id, subject_id=scope.subject_id)
    )
    return sum(1 for k in keys if redis_client().exists(k))


def _count_artifacts(scope: Scope) -> int:
    return artifacts_left(
        tenant_id=scope.tenant_id, digests=scope.artifact_digests, except_runs=scope.run_ids
    )


def register() -> None:
    """Called from RunsConfig.ready."""
    for table, tenant, columns in (
        (
            "agent_runs",
            _IN_TENANT,
            (
                ("state", "json"),
                ("result", "json"),
                ("subject", "text"),
                ("suspend_detail", "text"),
                ("idempotency_key", "text"),
            ),
        ),
        (
            "agent_events",
            _RUN_IN_TENANT,
            (("payload", "json"), ("state", "json"), ("client_message_id", "text")),
        ),
        ("approvals", _IN_TENANT, (("request", "json"), ("reasons", "json"), ("note", "text"))),
        ("tool_operations", _IN_TENANT, (("result", "json"), ("history", "json"))),
    ):
        for column, kind in columns:
            place_register(
                column_place(
                    table=table,
                    column=column,
                    kind=kind,
                    tenant_sql=tenant,
                    erased_by="runs",
                    mine_sql=_MINE,
                    owner_sql="t.subject" if table == "agent_runs" else _OWNER,
                    what=f"{table}.{column} (redacted)",
                    run_sql="t.run_id",
                )
            )
    for column in ("facts", "open_questions", "decisions", "carry", "text", "unsupported_facts"):
        place_register(
            column_place(
                table="summaries",
                column=column,
                kind="text" if column == "text" else "json",
                tenant_sql=_IN_TENANT,
                erased_by="runs",
                mine_sql=_MINE,
                owner_sql=_OWNER,
                what=f"summaries.{column} (deleted)",
                run_sql="t.run_id",
            )
        )
    place_register(
        column_place(
            table="tool_operations",
            column="operation_id",
            kind="text",
            tenant_sql=_IN_TENANT,
            mine_sql=_MINE,
            owner_sql=_OWNER,
            values=False,
            erased_by="runs",
            what="tool_operations.operation_id: the external system's idempotency key; rewritten once the "
            "operation has its outcome, kept while it is in doubt (another key could apply a refund twice): "
            "reconcile it, then erase again",
            run_sql="t.run_id",
        )
    )
    place_register(
        column_place(
            table="tool_operations",
            column="external_ref",
            kind="text",
            tenant_sql=_IN_TENANT,
            mine_sql=_MINE,
            owner_sql=_OWNER,
            erased_by="runs",
            what="tool_operations.external_ref: the external system's id (rewritten where it holds the subject's "
            "id or text)",
            run_sql="t.run_id",
        )
    )
    place_register(
        Place(
            name="redis.session_windows",
            what="Redis session windows of the subject's runs",
            erased_by="runs",
            count=_count_session_windows,
        )
    )
    place_register(
        Place(
            name="artifacts.stored",
            what="stored blobs (tool results, workspace files, a state's attachments) only the subject's "
            "runs refer to",
            erased_by="runs",
            count=_count_artifacts,
        )
    )
    ids = "ids, digests, statuses, codes, step and workflow names"
    free_register(
        "agent_runs",
        ids,
        "workflow_name",
        "workflow_version",
        "status",
        "next_step",
        "state_digest",
        "suspend_reason",
        "input_digest",
    )
    free_register(
        "agent_runs",
        "who holds or asked: a worker id, a staff user or API key",
        "lease_owner",
        "resume_requested_by",
    )
    free_register("agent_events", ids, "event_type", "step_id", "state_digest", "next_step")
    free_register("agent_events", "who acted: a worker id, a staff user or API key", "actor")
    free_register(
        "tool_operations", ids, "step_id", "tool_name", "tool_contract_version", "request_digest", "status"
    )
    free_register("approvals", ids, "step_id", "request_digest", "status")
    free_register("approvals", "who decided: a staff user or API key", "decided_by")
    free_register(
        "summaries",
        ids + "; the compactor's model and prompt version",
        "source_digest",
        "compactor",
        "status",
    )
