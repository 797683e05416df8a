from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from core import offboarding
        from core.erasure import LabelsEraser, eraser_register, free_register
        from core.tracing import tracing_setup

        tracing_setup()  # OpenTelemetry, only when OTEL_* asks for it

        offboarding.register()
        eraser_register(LabelsEraser())

        free_register("tenants", "the customer organisation (Keeper's tenant), not a subject", "slug", "name")
        # The bytes they name are a subject's data, erased through the rows that refer to them
        # (the runs' "artifacts.stored" place); the records hold digests, store names and keys.
        free_register(
            "stored_artifacts",
            "a stored blob's digest, the store holding it and its key",
            "digest",
            "store",
            "key",
        )
        free_register(
            "api_keys",
            "a key's label, prefix, scope and the digest of its secret",
            "name",
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
