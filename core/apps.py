from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from core import offboarding
        from core.erasure import LabelsEraser, column_place, eraser_register, free_register, place_register
        from core.tracing import tracing_setup

        tracing_setup()  # OpenTelemetry, only when OTEL_* asks for it

        offboarding.register()
        eraser_register(LabelsEraser())

        free_register("tenants", "the customer organisation (Keeper's tenant), not a subject", "slug", "name")
        place_register(
            column_place(
                table="api_keys",
                column="name",
                kind="text",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by="labels",
                what="api_keys.name: a key's label, which staff may name after a customer (keyed)",
            )
        )
        free_register(
            "api_keys",
            "a key's prefix, scope and the digest of its secret",
            "prefix",
            "scope",
            "secret_sha256",
        )
        # Django's own tables: staff accounts, permissions and bookkeeping; subjects never sign in.
        staff = "Django's staff accounts and permissions (staff, not subjects)"
        free_register("auth_user", staff, "username", "password", "email", "first_name", "last_name")
        free_register("auth_group", staff, "name")
        free_register("auth_permission", staff, "codename", "name")
        free_register(
            "django_session",
            "staff sign-in sessions (ids and the signed-in user)",
            "session_key",
            "session_data",
        )
        free_register(
            "django_admin_log",
            "the Django admin's log of staff edits to staff-managed objects",
            "change_message",
            "object_id",
            "object_repr",
        )
        free_register("django_content_type", "model names", "app_label", "model")
        free_register("django_migrations", "migration names", "app", "name")
