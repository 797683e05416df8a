from django.apps import AppConfig
from django.core import checks


class ErasureConfig(AppConfig):
    name = "erasure"
    verbose_name = "Erasure"

    def ready(self) -> None:
        from erasure.checks import erasers_check

        checks.register(erasers_check)
