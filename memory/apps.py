from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"

    def ready(self) -> None:
        from memory.erasure import register
        from memory.poisoning import erasure as held_erasure

        register()
        held_erasure.register()
