from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from core.erasure import column_place, free_register, place_register

        # The audit log is append-only (a trigger refuses UPDATE and DELETE): it is never erased.
        # The console audits erasures by request id and subject digest and asks staff not to write
        # a subject's data in notes; the scan proves it, and a match makes the receipt not clean.
        for column, kind in (("note", "text"), ("details", "json"), ("target_id", "text")):
            place_register(
                column_place(
                    table="console_audit_log",
                    column=column,
                    kind=kind,
                    tenant_sql="t.tenant_id = %(tenant)s",
                    erased_by="",
                    what=f"console_audit_log.{column}: append-only by trigger, never erased; searched to "
                    "prove it holds no copy (a match is left for the operator and the receipt is not clean)",
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
