from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from console.erasure import AuditNotesEraser
        from core.erasure import column_place, eraser_register, free_register, place_register

        # The audit log is append-only (a trigger refuses UPDATE and DELETE) except that erasure may
        # blank a note written about the subject (migration 0003). Details and target ids are never
        # rewritten: the console audits by ids and digests, and the scan proves it.
        eraser_register(AuditNotesEraser())
        place_register(
            column_place(
                table="console_audit_log",
                column="note",
                kind="text",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by="console",
                what="console_audit_log.note: staff notes on the subject's runs, approvals and operations, "
                "or holding the subject's id or a distinctive text of theirs (the entry itself stays as evidence)",
            )
        )
        for column, kind in (("details", "json"), ("target_id", "text")):
            place_register(
                column_place(
                    table="console_audit_log",
                    column=column,
                    kind=kind,
                    tenant_sql="t.tenant_id = %(tenant)s",
                    erased_by="",
                    what=f"console_audit_log.{column}: append-only, never rewritten; searched to prove it "
                    "holds no copy (a match is left for the operator and the receipt is not clean)",
                )
            )
        free_register(
            "console_audit_log",
            "who (staff user), what action, on which kind of target, from where",
            "actor",
            "action",
            "target_type",
            "remote_addr",
        )
