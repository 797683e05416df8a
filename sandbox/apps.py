from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    verbose_name = "Sandbox (external systems)"

    def ready(self) -> None:
        from core.erasure import free_register

        # The sandbox stands in for the shop's order and payment systems, which Keeper does not own:
        # their records (a customer id on an order) are erased by those systems' own processes.
        external = "a stand-in for an external order/payment system; its records are that system's to erase"
        free_register("sandbox_orders", external, "order_id", "customer_id", "currency", "status", "category")
        free_register(
            "sandbox_refunds",
            external,
            "refund_id",
            "order_id",
            "idempotency_key",
            "request_digest",
            "currency",
            "status",
        )
        free_register("sandbox_faults", "fault injection settings for tests", "fault", "order_id")
