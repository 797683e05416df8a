"""What the console keeps about a subject: staff notes in the audit log, blanked by erasure.

The audit entry itself (who did what to which object, when) stays: it is evidence. Its note is the
subject's data when it was written about one of the subject's runs, approvals or operations, or when
it holds the subject's id or a distinctive text of theirs; the trigger of migration 0003 lets erasure blank exactly that.
"""

from __future__ import annotations

from uuid import UUID

from console.models import AuditEntry
from core.erasure import Scope, distinctive
from core.tenancy import tenant_scope
from runs.conversations.erasure import ERASED, Redactor
from runs.kernel.models import Approval, ToolOperation


class AuditNotesEraser:
    name = "console"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        return Scope(tenant_id=tenant_id, subject_id=subject_id)  # the runs eraser finds the runs

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        # A note on another object is the subject's only when it names them: their id, or a text
        # distinctive enough to be theirs (the scan's rule outside the subject's rows). The same
        # word in another customer's note ("conversation", "Ada") is that customer's.
        elsewhere = Redactor(scope.subject_id, tuple(v for v in scope.values if distinctive(v)))
        runs = [str(r) for r in scope.run_ids]
        with tenant_scope(scope.tenant_id):
            targets = (
                {("run", r) for r in runs}
                | {
                    ("approval", str(a))
                    for a in Approval.objects.filter(run_id__in=scope.run_ids).values_list(
                        "approval_id", flat=True
                    )
                }
                | {
                    ("operation", o)
                    for o in ToolOperation.objects.filter(run_id__in=scope.run_ids).values_list(
                        "operation_id", flat=True
                    )
                }
            )
            blanked = 0
            entries = (
                AuditEntry.objects.filter(tenant_id=scope.tenant_id).exclude(note="").exclude(note=ERASED)
            )
            for entry in entries.only("id", "note", "details", "target_type", "target_id").iterator():
                if (entry.target_type, entry.target_id) in targets or elsewhere.hit(entry.note):
                    AuditEntry.objects.filter(pk=entry.pk).update(
                        note=ERASED, details={**entry.details, "note_erased_by": str(request_id)}
                    )
                    blanked += 1
        return {"audit_notes_erased": blanked}
