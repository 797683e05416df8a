"""The console's audit log: a staff note about the subject is blanked; the entry stays as evidence.

The entry itself (who did what to which object, when) stays. Its note is the subject's data when it
was written about one of the subject's runs, approvals or operations, or when it holds the subject's
id or a distinctive text of theirs; the log's trigger (console migration 0003) lets erasure blank
exactly that note and nothing else. Details and target ids are never rewritten: the console audits by
ids and digests, and the scan proves it. The table is the console's; it is reached here by name.
"""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from core.tenancy import tenant_scope
from erasure.matching import Scope, distinctive
from erasure.places import Place, column_place
from erasure.redactor import Redactor
from erasure.registry import Eraser, Free, free
from runs.conversations.erasure import ERASED
from runs.kernel.models import Approval, ToolOperation

APPEND_ONLY = (
    "the audit log is append-only evidence and is never rewritten: an operator decides whether this "
    "entry stays as a legal record (the receipt cannot say clean while it holds the subject's id)"
)


class AuditNotesEraser(Eraser):
    name = "console"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        # A note on another object is the subject's only when it names them: their id, or a text
        # distinctive enough to be theirs (the scan's rule outside the subject's rows). The same
        # word in another customer's note ("conversation", "Ada") is that customer's.
        elsewhere = Redactor(scope.subject_id, tuple(v for v in scope.values if distinctive(v)))
        with tenant_scope(scope.tenant_id):
            approvals = Approval.objects.filter(run_id__in=scope.run_ids).values_list(
                "approval_id", flat=True
            )
            operations = ToolOperation.objects.filter(run_id__in=scope.run_ids).values_list(
                "operation_id", flat=True
            )
            targets = (
                {("run", str(r)) for r in scope.run_ids}
                | {("approval", str(a)) for a in approvals}
                | {("operation", o) for o in operations}
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id, at, note, target_type, target_id FROM console_audit_log"
                    " WHERE tenant_id = %s AND note <> '' AND note <> %s",
                    [scope.tenant_id, ERASED],
                )
                blank = [
                    (row_id, at)
                    for row_id, at, note, target_type, target_id in cursor.fetchall()
                    if (target_type, target_id) in targets or elsewhere.hit(note)
                ]
                for row_id, at in blank:
                    # (id, at) names the entry and its month's partition, however old
                    cursor.execute(
                        "UPDATE console_audit_log SET note = %s,"
                        " details = details || jsonb_build_object('note_erased_by', %s::text)"
                        " WHERE tenant_id = %s AND id = %s AND at = %s",
                        [ERASED, str(request_id), scope.tenant_id, row_id, at],
                    )
        return {"audit_notes_erased": len(blank)}

    def places(self) -> list[Place]:
        tenant = "t.tenant_id = %(tenant)s"
        return [
            column_place(
                table="console_audit_log",
                column="note",
                kind="text",
                tenant_sql=tenant,
                erased_by=self.name,
                what="console_audit_log.note: staff notes on the subject's runs, approvals and operations, "
                "or holding the subject's id or a distinctive text of theirs (the entry itself stays as evidence)",
            ),
            *(
                column_place(
                    table="console_audit_log",
                    column=column,
                    kind=kind,
                    tenant_sql=tenant,
                    erased_by="",
                    what=f"console_audit_log.{column}: append-only, never rewritten; searched to prove it "
                    "holds no copy (a match is left for the operator and the receipt is not clean)",
                    remedy=APPEND_ONLY,
                )
                for column, kind in (("details", "json"), ("target_id", "text"))
            ),
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "console_audit_log",
                "who (staff user), what action, on which kind of target, from where",
                "actor",
                "action",
                "target_type",
                "remote_addr",
            )
        ]
