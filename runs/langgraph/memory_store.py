"""KeeperStore: LangGraph's BaseStore on Keeper's long-term memory, so a graph's memory is the subject's.

A namespace is `(root, subject_id, label, ...)`: the root (default "memories") marks Keeper memory, the
second label is the subject the claims are about, and the labels after it, joined with dots, are the
memory namespace (`("memories", "cust-1", "preferences")` -> subject "cust-1", namespace
"preferences"). Every write goes through memory_remember (its write policy, tombstones, provenance),
every read through memory's selectors under row-level security as the store's tenant.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import MemoryItem
from memory.projection import memory_search_scope
from memory.selectors import (
    memory_current_claim,
    memory_current_claims,
    memory_current_scopes,
    memory_first_kept,
)
from memory.services import MemoryConflict, memory_invalidate, memory_remember
from runs.langgraph import store as thread_store

__all__ = ["KeeperStore", "DELETED"]

DELETED = "deleted through the LangGraph store"
SOURCE = "langgraph"


def _graph_context() -> dict[str, Any]:
    """The running graph's thread, checkpoint and node, when the store is called from inside one."""
    try:
        from langgraph.config import get_config

        config = get_config()
    except (ImportError, RuntimeError):  # called outside a graph: no thread to name
        return {}
    configurable = config.get("configurable", {})
    metadata = config.get("metadata", {})
    # A node's config names no checkpoint_id (LangGraph clears it for tasks); its checkpoint map
    # names the checkpoint the node's superstep ran from, by namespace: the innermost is the node's.
    checkpoints = configurable.get("checkpoint_map") or {}
    ran_from = (
        checkpoints[max(checkpoints, key=len)] if isinstance(checkpoints, dict) and checkpoints else None
    )
    found = {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns") or None,
        "checkpoint_id": configurable.get("checkpoint_id") or metadata.get("checkpoint_id") or ran_from,
        "node": metadata.get("langgraph_node"),
        "graph_id": metadata.get("graph_id") or configurable.get("graph_id"),
    }
    return {k: str(v) for k, v in found.items() if v}


class KeeperStore(BaseStore):
    """`KeeperStore(tenant_id=...)`; namespaces are `(root, subject_id, label, ...)` (see the module).

    `source_type` and `validation_method` say what a graph's writes are worth to memory's write
    policy: by default a model's unvalidated inference, so a sensitive trait is refused and the claim
    expires after KEEPER_INFERENCE_TTL_DAYS; a graph that stores what the user said may say so.
    """

    supports_ttl = False

    def __init__(
        self,
        *,
        tenant_id: UUID,
        root: str = "memories",
        actor: str = "langgraph",
        source_type: str = "model_inference",
        validation_method: str = "unvalidated",
    ) -> None:
        if not isinstance(tenant_id, UUID):
            raise TypeError("KeeperStore takes the tenant's UUID")
        if not root or "." in root:
            raise InvalidNamespaceError("the root label must be a non-empty label without dots")
        self.tenant_id = tenant_id
        self.root = root
        self.actor = actor
        self.source_type = source_type
        self.validation_method = validation_method
        self._tenant: Tenant | None = None
        self._runs: dict[str, UUID] = {}
        self._connections = thread_store.ThreadConnections()

    # --- the namespace rule -------------------------------------------------------------------

    def _scope(self, namespace: tuple[str, ...]) -> tuple[str, str]:
        """(subject, memory namespace) of an item's namespace."""
        if len(namespace) < 3 or namespace[0] != self.root:
            raise InvalidNamespaceError(
                f"KeeperStore namespaces are ({self.root!r}, subject_id, label, ...); got {namespace!r}"
            )
        return namespace[1], ".".join(namespace[2:])

    def _namespace(self, item: MemoryItem) -> tuple[str, ...]:
        return (self.root, item.subject_id, *item.namespace.split("."))

    def _prefix(self, prefix: tuple[str, ...]) -> tuple[str | None, str | None] | None:
        """(subject, namespace prefix) a search prefix covers, or None if it covers nothing here."""
        if prefix[:1] not in ((), (self.root,)):
            return None
        subject = prefix[1] if len(prefix) > 1 else None
        return subject, ".".join(prefix[2:]) or None

    # --- the tenant, the thread and connections ---------------------------------------------

    @property
    def tenant(self) -> Tenant:
        if self._tenant is None:
            self._tenant = Tenant.objects.get(tenant_id=self.tenant_id)
        return self._tenant

    def close(self) -> None:
        """Close the connections the store used in LangGraph's worker threads (as KeeperSaver.close)."""
        self._connections.close()

    async def aclose(self) -> None:
        """close() from async code (as KeeperSaver.aclose)."""
        await sync_to_async(self.close)()

    def _provenance(self) -> dict[str, Any]:
        graph = _graph_context()
        thread_id = graph.get("thread_id")
        run_id = None
        if thread_id is not None:
            # The thread's Keeper run, if KeeperSaver keeps it and has kept its first checkpoint (with
            # LangGraph's default async durability that may still be on its way: asked again next time).
            run_id = self._runs.get(thread_id) or thread_store.thread_run(
                tenant_id=self.tenant_id, thread_id=thread_id
            )
            if run_id is not None:
                self._runs[thread_id] = run_id
        return {
            "source_type": self.source_type,
            "source_id": f"{SOURCE}:thread:{thread_id}" if thread_id else SOURCE,
            "source_version": graph.get("checkpoint_id"),
            "run_id": str(run_id) if run_id else None,
            "event_seq": None,
            "validation_method": self.validation_method,
            "source": SOURCE,
            "writer": self.actor,
            **{k: v for k, v in graph.items() if k != "checkpoint_id"},
        }

    # --- results --------------------------------------------------------------------------------

    @staticmethod
    def _value(item: MemoryItem) -> dict[str, Any]:
        # Claims kept by other writers (extraction, the API) may be plain values.
        return item.value if isinstance(item.value, dict) else {"value": item.value}

    def _items(self, claims: list[MemoryItem]) -> list[Item]:
        first = memory_first_kept(tenant=self.tenant, memory_ids=[c.memory_id for c in claims])
        return [
            Item(
                value=self._value(c),
                key=c.key,
                namespace=self._namespace(c),
                created_at=first.get(c.memory_id, c.valid_from),
                updated_at=c.valid_from,
            )
            for c in claims
        ]

    # --- the operations -------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        subject, namespace = self._scope(op.namespace)
        claim = memory_current_claim(tenant=self.tenant, subject_id=subject, namespace=namespace, key=op.key)
        return self._items([claim])[0] if claim is not None else None

    def _put(self, op: PutOp) -> None:
        subject, namespace = self._scope(op.namespace)
        if op.value is None:
            claim = memory_current_claim(
                tenant=self.tenant, subject_id=subject, namespace=namespace, key=op.key
            )
            if claim is not None:
                # Invalidated at the same moment by another writer: deleted either way.
                with contextlib.suppress(MemoryConflict):
                    memory_invalidate(tenant=self.tenant, memory_id=claim.memory_id, reason=DELETED)
            return
        memory_remember(
            tenant=self.tenant,
            subject_id=subject,
            namespace=namespace,
            key=op.key,
            value=dict(op.value),
            provenance=self._provenance(),
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        covered = self._prefix(op.namespace_prefix)
        if covered is None or op.limit <= 0:
            return []
        subject, prefix = covered
        scope = memory_current_claims(subject_id=subject, namespace_prefix=prefix, value_filter=op.filter)
        scores: list[float | None]
        if op.query:
            hits = memory_search_scope(
                tenant=self.tenant, query=op.query, scope=scope, limit=op.limit, offset=op.offset
            )
            claims, scores = [h.item for h in hits], [h.score for h in hits]
        else:
            with tenant_scope(self.tenant_id):
                claims = list(scope.order_by("-valid_from", "memory_id")[op.offset : op.offset + op.limit])
            scores = [None] * len(claims)
        return [
            SearchItem(
                namespace=i.namespace,
                key=i.key,
                value=i.value,
                created_at=i.created_at,
                updated_at=i.updated_at,
                score=score,
            )
            for i, score in zip(self._items(claims), scores, strict=True)
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        subject = None
        for condition in op.match_conditions or ():
            path = condition.path
            if condition.match_type == "prefix" and len(path) > 1 and path[1] != "*":
                subject = path[1]
        scopes = memory_current_scopes(tenant=self.tenant, subject_id=subject)
        found: set[tuple[str, ...]] = set()
        for subject_id, namespace in scopes:
            full = (self.root, subject_id, *namespace.split("."))
            if all(_matches(full, c) for c in op.match_conditions or ()):
                found.add(full[: op.max_depth] if op.max_depth is not None else full)
        return sorted(found)[op.offset : op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        self._connections.use()
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        # One transaction for the batch: its writes are kept together or not at all.
        with tenant_scope(self.tenant_id):
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, PutOp):
                    self._put(op)
                    results.append(None)
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    raise TypeError(f"unknown store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await sync_to_async(self.batch)(list(ops))


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = (
        namespace[: len(path)]
        if condition.match_type == "prefix"
        else namespace[len(namespace) - len(path) :]
    )
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
