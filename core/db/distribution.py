"""Keeper's tables as Citus would hold them past one primary (docs/explanation/past-one-primary.md):
distributed by tenant_id and co-located, replicated to every node as reference tables, or left on the
coordinator. Nothing runs on Citus today; tests/core/test_tenant_predicates.py holds every statement
on a distributed table to naming its tenant, so that a shard can be found from the query alone.
"""

from __future__ import annotations

# One shard group per tenant: every table here has tenant_id NOT NULL, and its joins and foreign keys
# go through tenant_id (a run, its events, operations and approvals live on the same node).
DISTRIBUTED = frozenset(
    {
        "agent_runs",
        "agent_events",
        "tool_operations",
        "approvals",
        "summaries",
        "webhook_subscriptions",
        "webhook_deliveries",
        "langgraph_checkpoints",
        "langgraph_blobs",
        "langgraph_writes",
        "external_workflows",
        "workflow_schedules",
        "workspace_snapshots",
        "workspace_merges",
        "stored_artifacts",
        "run_replays",
        "eval_sets",
        "eval_set_runs",
        "eval_rounds",
        "erasure_requests",
        "memory_items",
        "memory_vectors",
        "memory_tombstones",
        "memory_postings",
        "memory_held_claims",
        "memory_procedures",
        "memory_procedure_sources",
        "retrieval_documents",
        "retrieval_chunks",
        "retrieval_principals",
        "retrieval_invalidations",
        "retrieval_tombstones",
        "retrieval_snapshots",
        "retrieval_acls",
        "retrieval_postings",
        "retrieval_terms",
    }
)

# Small, read on every request before the tenant is known (who is this key, this console user), and
# referenced by the distributed tables' foreign keys: a copy on every node.
REFERENCE = frozenset({"tenants", "api_keys", "console_memberships"})

# On the coordinator only: Django's own tables, the audit log (an entry may name no tenant), the
# offboarding receipts (they outlive their tenant), and the payment sandbox (an outside system).
COORDINATOR = frozenset(
    {"console_audit_log", "tenant_offboardings", "sandbox_orders", "sandbox_refunds", "sandbox_faults"}
)
