"""The places the runs app keeps a subject's data, and the columns of its tables that hold nobody's."""

from __future__ import annotations

from core.artifacts.reclaim import artifacts_left
from erasure.matching import Scope
from erasure.places import Place, column_place
from erasure.registry import Free, free
from runs.conversations.erasure import subject_session_keys
from runs.conversations.sessions import redis_client

ANOTHER_RUN = (
    "a run that is not the subject's (named here) holds their id or a text of theirs, because its input "
    "or a step copied it: an operator removes that copy (or erases the subject that run is about), then "
    "retries. In the subject's own runs this is a defect in Keeper: report it with this receipt"
)

_IN_TENANT = "t.tenant_id = %(tenant)s"
_RUN_IN_TENANT = "t.run_id IN (SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s)"
_MINE = "t.run_id = ANY(%(runs)s::uuid[])"
_OWNER = "(SELECT r.subject FROM agent_runs r WHERE r.run_id = t.run_id)"


def _count_session_windows(scope: Scope) -> int:
    keys = set(scope.session_keys) | set(
        subject_session_keys(tenant_id=scope.tenant_id, subject_id=scope.subject_id)
    )
    return sum(1 for k in keys if redis_client().exists(k))


def _count_artifacts(scope: Scope) -> int:
    return artifacts_left(
        tenant_id=scope.tenant_id, digests=scope.artifact_digests, except_runs=scope.run_ids
    )


def places() -> list[Place]:
    found: list[Place] = []
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
            found.append(
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
                    remedy=ANOTHER_RUN,
                )
            )
    for column in ("facts", "open_questions", "decisions", "carry", "text", "unsupported_facts"):
        found.append(
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
    found.append(
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
            "operation has its outcome, kept while it is in doubt (another key could apply a refund twice)",
            run_sql="t.run_id",
            remedy="an operation still in doubt keeps its idempotency key (another key could apply the "
            "side effect twice): reconcile the operation (support inbox, or POST "
            "/api/v1/operations/{id}/reconcile), then retry",
        )
    )
    # Who acted, decided or holds a run: a worker id, a staff user or an API key, and also a person's
    # own client (user:cust-1003 as the actor of their messages) or an outside worker named after a
    # person. Searched in every run of the tenant for the subject's id and distinctive texts, and in
    # the subject's runs for every text the request covers; keyed where they name the subject.
    for table, column, tenant, remedy in (
        ("agent_events", "actor", _IN_TENANT, ""),
        ("approvals", "decided_by", _IN_TENANT, ""),
        (
            "agent_runs",
            "lease_owner",
            _IN_TENANT,
            "a worker whose id names the subject holds this run's lease: stop that worker or give it "
            "another id, then retry once its lease has run out (KEEPER_LEASE_TTL seconds)",
        ),
        (
            "agent_runs",
            "resume_requested_by",
            _IN_TENANT,
            "this run's resume was asked for in the subject's name and has not happened yet: retry "
            "once the run has taken its next step (or cancel the run)",
        ),
    ):
        found.append(
            column_place(
                table=table,
                column=column,
                kind="text",
                tenant_sql=tenant,
                erased_by="runs",
                mine_sql=_MINE,
                what=f"{table}.{column}: who acted, decided or holds the run (keyed where it names the subject)",
                run_sql="t.run_id",
                remedy=remedy,
            )
        )
    found.append(
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
    found.append(
        Place(
            name="redis.session_windows",
            what="Redis session windows of the subject's runs",
            erased_by="runs",
            count=_count_session_windows,
        )
    )
    found.append(
        Place(
            name="artifacts.stored",
            what="stored blobs (tool results, workspace files, a state's attachments) only the subject's "
            "runs refer to",
            erased_by="runs",
            count=_count_artifacts,
        )
    )
    return found


def declared_free() -> list[Free]:
    ids = "ids, digests, statuses, codes, step and workflow names"
    return [
        free(
            "agent_runs",
            ids,
            "workflow_name",
            "workflow_version",
            "status",
            "next_step",
            "state_digest",
            "suspend_reason",
            "input_digest",
        ),
        free("agent_events", ids, "event_type", "step_id", "state_digest", "next_step"),
        free(
            "tool_operations",
            ids,
            "step_id",
            "tool_name",
            "tool_contract_version",
            "request_digest",
            "status",
        ),
        free("approvals", ids, "step_id", "request_digest", "status"),
        free(
            "summaries",
            ids + "; the compactor's model and prompt version",
            "source_digest",
            "compactor",
            "status",
        ),
        free(
            "external_workflows",
            "a workflow definition the tenant's developers registered (names, steps, tools, a JSON Schema, "
            "who registered it): never about a data subject",
            "name",
            "version",
            "steps",
            "tools",
            "input_schema",
            "approval_guarded_steps",
            "signals",
            "description",
            "created_by",
        ),
    ]
