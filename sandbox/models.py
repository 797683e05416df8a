"""The external systems of the demo workflow: orders and payments (a later issue)."""
