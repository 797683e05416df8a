"""Procedural memory: the subject's runs stop being a procedure's sources, and a procedure learned
only from them is deleted with them (a procedure keeps tool names and argument types, and the words
its requests shared)."""

from __future__ import annotations

from uuid import UUID

from erasure.matching import Scope
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from memory.procedures.services import procedures_erase_subject

_THEIRS = (
    "EXISTS (SELECT 1 FROM memory_procedure_sources s WHERE s.tenant_id = t.tenant_id"
    " AND s.procedure_id = t.procedure_id AND s.subject_id = %(subject)s)"
)


class ProceduresEraser(Eraser):
    name = "memory_procedures"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        return procedures_erase_subject(tenant_id=scope.tenant_id, subject_id=scope.subject_id)

    def places(self) -> list[Place]:
        sources = column_place(
            table="memory_procedure_sources",
            column="subject_id",
            kind="text",
            tenant_sql="t.tenant_id = %(tenant)s",
            erased_by=self.name,
            mine_sql="t.subject_id = %(subject)s",
            owner_sql="t.subject_id",
            what="memory_procedure_sources.subject_id (the subject's runs as sources: deleted)",
        )
        procedures = [
            column_place(
                table="memory_procedures",
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                mine_sql=_THEIRS,
                what=f"memory_procedures.{column} (deleted when learned only from the subject's runs)",
            )
            for column, kind in (
                ("name", "text"),
                ("trigger", "json"),
                ("steps", "json"),
                ("decision_note", "text"),
            )
        ]
        return [sources, *procedures]

    def free(self) -> list[Free]:
        return [
            free(
                "memory_procedures",
                "the workflow's name, the digest of the steps' shape, the status, the staff user who "
                "decided and the invalidation's code with run ids",
                "workflow_name",
                "shape_digest",
                "status",
                "decided_by",
                "invalidation_reason",
            ),
            free(
                "memory_procedure_sources",
                "the invalidation's code with run ids and event numbers",
                "invalidation_reason",
            ),
        ]
