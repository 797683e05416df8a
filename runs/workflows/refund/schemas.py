"""The refund workflow's state-schema history (v1 → v2 → v3) and the pure migrations between versions.

v3 is exactly what workflow.py writes today; older checkpoints reach it through REFUND_SCHEMAS.
"""

from __future__ import annotations

import copy
import re
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

from core.digests import json_digest
from runs.authoring import SchemaSet, State, StateSchemaError

_CURRENCY = re.compile(r"[A-Z]{3}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# v1 stored money as plain decimal text in major units ("25.00"): no sign, exponent, spaces or "_".
_MAJOR_AMOUNT = re.compile(r"[0-9]{1,24}(?:\.[0-9]{1,12})?")
_APPROVAL_STATUSES = ("pending", "approved", "rejected", "expired")
_OUTCOMES = ("refund", "deny")
# Digits after the decimal point (ISO 4217) for the currencies that do not have two.
_MINOR_UNIT_EXPONENTS = {"JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3}
_DEFAULT_MINOR_UNIT_EXPONENT = 2


class _Shape:
    """Type checks for one schema version; every failure names the key by its path in the state."""

    def __init__(self, version: int):
        self.version = version

    def fail(self, key: str, problem: str) -> NoReturn:
        raise StateSchemaError(
            f"refund state v{self.version}: '{key}' {problem}", details={"key": key, "version": self.version}
        )

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, "must be a JSON object")
        return value

    def text(self, value: Any, key: str, *, nullable: bool = False, max_length: int | None = None) -> None:
        if value is None and nullable:
            return
        if not isinstance(value, str):
            self.fail(key, "must be a string" + (" or null" if nullable else ""))
        if max_length is not None and not 0 < len(value) <= max_length:
            self.fail(key, f"must be 1 to {max_length} characters")

    def required(self, obj: dict[str, Any], key: str, prefix: str) -> Any:
        if key not in obj:
            self.fail(prefix + key, "is required")
        return obj[key]

    def currency(self, value: Any, key: str) -> None:
        if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
            self.fail(key, "must be a three-letter upper-case currency code such as EUR")

    def digest(self, value: Any, key: str) -> None:
        if not isinstance(value, str) or not _DIGEST.fullmatch(value):
            self.fail(key, "must be a digest 'sha256:<64 hex digits>'")

    def forbid(self, obj: dict[str, Any], keys: tuple[str, ...], prefix: str) -> None:
        for key in keys:
            if key in obj:
                self.fail(prefix + key, f"belongs to another state-schema version, not v{self.version}")

    def money(self, obj: dict[str, Any], prefix: str, key: str, *, required: bool, positive: bool) -> None:
        """`key` is the v2+ name (`amount_minor`); v1 stored `amount` as major-unit decimal text."""
        old_key = key.removesuffix("_minor")
        current, other = (old_key, key) if self.version == 1 else (key, old_key)
        self.forbid(obj, (other,), prefix)
        if current not in obj:
            if required:
                self.fail(prefix + current, "is required")
            return
        value = obj[current]
        if self.version == 1:
            if not isinstance(value, str) or not _MAJOR_AMOUNT.fullmatch(value):
                self.fail(prefix + current, "must be decimal text in major units such as '25.00'")
            if positive and Decimal(value) <= 0:
                self.fail(prefix + current, "must be greater than zero")
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
            bound = "a positive" if positive else "a non-negative"
            self.fail(prefix + current, f"must be {bound} whole number of minor units")


def _validate(state: State, version: int) -> None:
    shape = _Shape(version)
    shape.obj(state, "<state>")
    shape.text(shape.required(state, "order_id", ""), "order_id", max_length=100)
    # approvals (v1, v2: every approval asked for) became approval (v3: the one in force).
    shape.forbid(state, ("approvals",) if version >= 3 else ("approval",), "")
    if "budgets" in state:  # the engine's; its inner shape is the engine's business
        shape.obj(state["budgets"], "budgets")
    shape.money(state, "", "amount_minor", required=False, positive=True)
    if "currency" in state:
        shape.currency(state["currency"], "currency")
    if "reason" in state:
        shape.text(state["reason"], "reason")
    _validate_pair(shape, state, "order", "order_digest")
    if "order" in state:
        _validate_order(shape, state["order"])
        shape.digest(state["order_digest"], "order_digest")
    if "decision" in state:
        _validate_decision(shape, state["decision"])
    _validate_pair(shape, state, "refund_request", "request_digest")
    if "refund_request" in state:
        request = _validate_refund_request(shape, state["refund_request"])
        shape.digest(state["request_digest"], "request_digest")
        # The approve step refuses a request whose digest differs; a state that already differs is corrupt.
        if state["request_digest"] != json_digest(request):
            shape.fail("request_digest", "does not match the digest of 'refund_request'")
    if "approval" in state:
        _validate_approval(shape, state["approval"], "approval")
    if "approvals" in state:
        approvals = state["approvals"]
        if not isinstance(approvals, list):
            shape.fail("approvals", "must be a list")
        for i, approval in enumerate(approvals):
            _validate_approval(shape, approval, f"approvals[{i}]")
    if "refund" in state:
        if "operation_id" not in state:
            shape.fail("operation_id", "is required once 'refund' is present")
        _validate_refund(shape, state["refund"])
    if "operation_id" in state:
        _validate_operation_id(shape, state)


def _validate_pair(shape: _Shape, state: State, key: str, digest_key: str) -> None:
    # The workflow writes both in one step; one without the other is not a state it can produce.
    if (key in state) != (digest_key in state):
        present, missing = (key, digest_key) if key in state else (digest_key, key)
        shape.fail(missing, f"is required together with '{present}'")


def _validate_order(shape: _Shape, value: Any) -> None:
    order = shape.obj(value, "order")
    for key in ("order_id", "customer_id", "status"):
        shape.text(shape.required(order, key, "order."), f"order.{key}")
    shape.currency(shape.required(order, "currency", "order."), "order.currency")
    shape.money(order, "order.", "amount_minor", required=True, positive=True)
    shape.money(order, "order.", "refunded_minor", required=True, positive=False)
    shape.text(shape.required(order, "delivered_at", "order."), "order.delivered_at", nullable=True)
    if "category" in order:
        shape.text(order["category"], "order.category", nullable=True)


def _validate_decision(shape: _Shape, value: Any) -> None:
    decision = shape.obj(value, "decision")
    if shape.required(decision, "outcome", "decision.") not in _OUTCOMES:
        shape.fail("decision.outcome", f"must be one of {', '.join(_OUTCOMES)}")
    reasons = shape.required(decision, "reasons", "decision.")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        shape.fail("decision.reasons", "must be a list of strings")
    shape.text(shape.required(decision, "decider", "decision."), "decision.decider")
    shape.obj(shape.required(decision, "details", "decision."), "decision.details")


def _validate_refund_request(shape: _Shape, value: Any) -> dict[str, Any]:
    request = shape.obj(value, "refund_request")
    shape.text(shape.required(request, "order_id", "refund_request."), "refund_request.order_id")
    shape.money(request, "refund_request.", "amount_minor", required=True, positive=True)
    shape.currency(shape.required(request, "currency", "refund_request."), "refund_request.currency")
    return request


def _validate_approval(shape: _Shape, value: Any, key: str) -> None:
    approval = shape.obj(value, key)
    approval_id = shape.required(approval, "approval_id", f"{key}.")
    if not isinstance(approval_id, str) or not _is_uuid_text(approval_id):
        shape.fail(f"{key}.approval_id", "must be a UUID in its canonical text form")
    if shape.required(approval, "status", f"{key}.") not in _APPROVAL_STATUSES:
        shape.fail(f"{key}.status", f"must be one of {', '.join(_APPROVAL_STATUSES)}")
    shape.text(shape.required(approval, "decided_by", f"{key}."), f"{key}.decided_by", nullable=True)


def _is_uuid_text(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _validate_refund(shape: _Shape, value: Any) -> None:
    # Whatever the payments API answered, plus refund_id; only the keys Keeper reads are checked.
    refund = shape.obj(value, "refund")
    shape.text(shape.required(refund, "refund_id", "refund."), "refund.refund_id", max_length=200)
    for key in ("order_id", "status", "idempotency_key"):
        if key in refund:
            shape.text(refund[key], f"refund.{key}")
    if "created_at" in refund:
        shape.text(refund["created_at"], "refund.created_at", nullable=True)
    if "currency" in refund:
        shape.currency(refund["currency"], "refund.currency")
    shape.money(refund, "refund.", "amount_minor", required=False, positive=True)


def _validate_operation_id(shape: _Shape, state: State) -> None:
    operation_id = state["operation_id"]
    if (
        not isinstance(operation_id, str)
        or not operation_id.startswith("refund:")
        or operation_id == "refund:"
    ):
        shape.fail("operation_id", "must be 'refund:{order_id}'")
    request = state.get("refund_request")
    # The operation id is the payments idempotency key: it must name the order being refunded.
    if isinstance(request, dict) and operation_id != f"refund:{request['order_id']}":
        shape.fail("operation_id", "must be 'refund:' + refund_request.order_id")


def validate_v1(state: State) -> None:
    _validate(state, 1)


def validate_v2(state: State) -> None:
    _validate(state, 2)


def validate_v3(state: State) -> None:
    _validate(state, 3)


def _migration_error(key: str, problem: str, version: int) -> NoReturn:
    raise StateSchemaError(
        f"refund state v{version}: '{key}' {problem}", details={"key": key, "version": version}
    )


def _major_to_minor(text: Any, currency: Any, *, key: str) -> int:
    """Exact conversion of v1 decimal text in major units; anything that would need rounding raises."""
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        _migration_error(key, f"has no known currency to convert with (got {currency!r})", 1)
    if not isinstance(text, str):
        _migration_error(key, f"must be decimal text, not {type(text).__name__}", 1)
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError):
        _migration_error(key, f"is not a decimal number: {text!r}", 1)
    if not value.is_finite():
        _migration_error(key, f"is not a finite amount: {text!r}", 1)
    if value.is_signed():
        _migration_error(key, f"is negative: {text!r}", 1)
    if not _MAJOR_AMOUNT.fullmatch(text):
        _migration_error(key, f"is not plain decimal text such as '25.00': {text!r}", 1)
    exponent = _MINOR_UNIT_EXPONENTS.get(currency, _DEFAULT_MINOR_UNIT_EXPONENT)
    # Integer arithmetic on the exact fraction: no Decimal context, so no silent rounding anywhere.
    numerator, denominator = value.as_integer_ratio()
    minor, remainder = divmod(numerator * 10**exponent, denominator)
    if remainder:
        _migration_error(
            key, f"{text!r} is not a whole number of {currency} minor units; refusing to round", 1
        )
    return minor


def _renamed(obj: dict[str, Any], old: str, new: str, value: Any) -> dict[str, Any]:
    """A copy of obj with `old` replaced by `new` at the same position (stored JSON stays readable)."""
    return {(new if k == old else k): (value if k == old else v) for k, v in obj.items()}


def _convert_amounts(
    obj: dict[str, Any], currency: Any, prefix: str, keys: tuple[str, ...]
) -> dict[str, Any]:
    for old in keys:
        if old in obj:
            minor = _major_to_minor(obj[old], currency, key=prefix + old)
            obj = _renamed(obj, old, f"{old}_minor", minor)
    return obj


def migrate_v1_to_v2(state: State) -> State:
    """Money from major-unit decimal text to integer minor units; digests recomputed over the result."""
    out = copy.deepcopy(state)
    if "amount" in out:
        # The run's input carried no currency of its own in most runs: take the one the run acts in.
        order, request = out.get("order"), out.get("refund_request")
        currency = (
            out.get("currency")
            or (order.get("currency") if isinstance(order, dict) else None)
            or (request.get("currency") if isinstance(request, dict) else None)
        )
        out = _convert_amounts(out, currency, "", ("amount",))
    if isinstance(out.get("order"), dict):
        order = out["order"]
        order = _convert_amounts(order, order.get("currency"), "order.", ("amount", "refunded"))
        out["order"] = order
        out["order_digest"] = json_digest(order)
    if isinstance(out.get("refund_request"), dict):
        request = out["refund_request"]
        request = _convert_amounts(request, request.get("currency"), "refund_request.", ("amount",))
        out["refund_request"] = request
        # The digest binds approvals to the exact request. Approvals recorded against the old digest
        # no longer match, so the approve step asks again: the safe outcome, since a person approved
        # the request in its old form, not this one.
        out["request_digest"] = json_digest(request)
    if isinstance(out.get("refund"), dict):
        refund = out["refund"]
        out["refund"] = _convert_amounts(refund, refund.get("currency"), "refund.", ("amount",))
    return out


def migrate_v2_to_v3(state: State) -> State:
    """The list of every approval asked for becomes the one in force: the last, i.e. newest."""
    out = copy.deepcopy(state)
    if "approvals" not in out:
        return out
    approvals = out["approvals"]
    if not isinstance(approvals, list):
        _migration_error("approvals", "must be a list", 2)
    if not approvals:
        return {k: v for k, v in out.items() if k != "approvals"}
    # Earlier approvals are history, not state the steps act on; the approvals table keeps every
    # one of them (with request digest, decider and note), so dropping them here loses nothing.
    return _renamed(out, "approvals", "approval", approvals[-1])


REFUND_SCHEMAS = SchemaSet(
    validators={1: validate_v1, 2: validate_v2, 3: validate_v3},
    migrations={(1, 2): migrate_v1_to_v2, (2, 3): migrate_v2_to_v3},
)
