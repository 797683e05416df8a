from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from core.tracing import tracing_setup

        tracing_setup()  # OpenTelemetry, only when OTEL_* asks for it
