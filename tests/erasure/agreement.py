"""The registry and the final scan agree: the scan never finds a subject in a column declared free."""

from __future__ import annotations

from typing import Any


def assert_registry_agrees(receipt: dict[str, Any] | None) -> None:
    """A declared-free column is listed on a receipt only where the scan found the subject there,
    before or after erasing: then the declaration is wrong, and the column must become a place."""
    assert receipt is not None
    wrong = {p["place"]: (p["before"], p["after"]) for p in receipt["places"] if p.get("declared_free")}
    assert wrong == {}, f"declared free of personal data, yet the scan found the subject: {wrong}"
