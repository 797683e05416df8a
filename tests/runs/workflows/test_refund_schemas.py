"""The refund state-schema history: stored old checkpoints validate, migrate to v3 exactly, or are refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from core.digests import json_digest
from runs.engine.state_migrations import StateSchemaError, UnsupportedCheckpoint
from runs.workflows.refund.schemas import (
    REFUND_SCHEMAS,
    migrate_v1_to_v2,
    migrate_v2_to_v3,
    validate_v1,
    validate_v2,
    validate_v3,
)

CHECKPOINTS = Path(__file__).parent.parent / "fixtures" / "checkpoints"
FIXTURES = sorted(CHECKPOINTS.glob("*.json"))
REFUND_STEPS = ("lookup_order", "decide", "approve", "refund", "verify")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _fixture(name: str) -> dict[str, Any]:
    return _load(CHECKPOINTS / name)


KNOWN = [p for p in FIXTURES if 1 <= _load(p)["state_schema_version"] <= 3]
V1 = [p for p in FIXTURES if _load(p)["state_schema_version"] == 1]
OLD = [p for p in FIXTURES if _load(p)["state_schema_version"] in (1, 2)]


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_fixture_folder_holds_old_current_and_unknown_checkpoints() -> None:
    versions = [_load(p)["state_schema_version"] for p in FIXTURES]
    assert len(FIXTURES) >= 7
    assert {0, 1, 2, 3} <= set(versions)
    assert versions.count(1) >= 3 and versions.count(2) >= 2


@pytest.mark.parametrize("path", FIXTURES, ids=_ids(FIXTURES))
def test_fixture_is_a_refund_checkpoint_that_says_what_it_is(path: Path) -> None:
    doc = _load(path)
    assert set(doc) == {"workflow", "state_schema_version", "next_step", "state", "note"}
    assert doc["workflow"] == "refund"
    assert doc["next_step"] in REFUND_STEPS
    assert len(doc["note"]) > 20


@pytest.mark.parametrize("path", KNOWN, ids=_ids(KNOWN))
def test_fixture_validates_at_its_own_version(path: Path) -> None:
    doc = _load(path)
    REFUND_SCHEMAS.validate(doc["state_schema_version"], doc["state"])


@pytest.mark.parametrize("path", V1, ids=_ids(V1))
def test_v1_fixture_does_not_validate_as_a_later_version(path: Path) -> None:
    state = _load(path)["state"]

    with pytest.raises(StateSchemaError, match="belongs to another state-schema version"):
        validate_v2(state)
    with pytest.raises(StateSchemaError, match="belongs to another state-schema version"):
        validate_v3(state)


def test_v2_states_differ_from_v3_only_once_approvals_were_asked_for() -> None:
    with pytest.raises(StateSchemaError, match="'approvals'"):
        validate_v3(_fixture("refund_v2_verify_two_approvals.json")["state"])
    # Before the approve step the two shapes coincide.
    validate_v3(_fixture("refund_v2_decide.json")["state"])


@pytest.mark.parametrize("path", KNOWN, ids=_ids(KNOWN))
def test_fixture_migrates_hop_by_hop_to_a_valid_v3(path: Path) -> None:
    doc = _load(path)
    state, version = doc["state"], doc["state_schema_version"]

    migrated = REFUND_SCHEMAS.migrate(state, version)

    assert migrated.version == 3
    validate_v3(migrated.state)
    assert [(s.from_version, s.to_version) for s in migrated.steps] == [(v, v + 1) for v in range(version, 3)]
    expected, data = [], state
    for step in migrated.steps:
        after = REFUND_SCHEMAS.migrations[(step.from_version, step.to_version)](copy.deepcopy(data))
        expected.append((json_digest(data), json_digest(after)))
        # A hop that changed the content shows it in its digests; one that changed nothing does not.
        assert (step.digest_before != step.digest_after) == (after != data)
        data = after
    assert [(s.digest_before, s.digest_after) for s in migrated.steps] == expected
    assert migrated.state == data


def test_hops_that_change_content_have_different_digests_and_a_no_op_hop_has_equal_ones() -> None:
    eur = REFUND_SCHEMAS.migrate(_fixture("refund_v1_refund_eur.json")["state"], 1)
    just_looked_up = REFUND_SCHEMAS.migrate(_fixture("refund_v2_decide.json")["state"], 2)

    assert all(step.digest_before != step.digest_after for step in eur.steps)
    # No approvals had been asked for yet, so v2 → v3 has nothing to change.
    (step,) = just_looked_up.steps
    assert step.digest_before == step.digest_after


@pytest.mark.parametrize("path", KNOWN, ids=_ids(KNOWN))
def test_migration_is_deterministic_and_leaves_the_stored_state_alone(path: Path) -> None:
    doc = _load(path)
    state, version = doc["state"], doc["state_schema_version"]
    snapshot = copy.deepcopy(state)

    first = REFUND_SCHEMAS.migrate(state, version)
    second = REFUND_SCHEMAS.migrate(state, version)

    assert json.dumps(first.state, sort_keys=True) == json.dumps(second.state, sort_keys=True)
    assert first.steps == second.steps
    assert state == snapshot


@pytest.mark.parametrize("path", OLD, ids=_ids(OLD))
def test_migration_functions_are_pure_without_the_schema_sets_copy(path: Path) -> None:
    doc = _load(path)
    state = doc["state"]
    snapshot = copy.deepcopy(state)
    migrate = migrate_v1_to_v2 if doc["state_schema_version"] == 1 else migrate_v2_to_v3

    out = migrate(state)
    # The output shares nothing mutable with the input: changing it leaves the input as it was.
    for value in out.values():
        if isinstance(value, dict):
            value["tampered"] = True
        elif isinstance(value, list):
            value.append("tampered")

    assert state == snapshot


def test_unknown_version_zero_is_refused() -> None:
    doc = _fixture("refund_v0_unknown.json")
    assert doc["state_schema_version"] == 0

    with pytest.raises(UnsupportedCheckpoint):
        REFUND_SCHEMAS.migrate(doc["state"], doc["state_schema_version"])
    with pytest.raises(UnsupportedCheckpoint):
        REFUND_SCHEMAS.validate(0, doc["state"])


def test_a_version_newer_than_the_code_is_refused() -> None:
    with pytest.raises(UnsupportedCheckpoint):
        REFUND_SCHEMAS.migrate(_fixture("refund_v3_approve.json")["state"], 4)


@pytest.mark.parametrize(
    ("text", "currency", "minor"),
    [
        ("25.00", "EUR", 2500),
        ("25", "EUR", 2500),
        ("25.0000", "EUR", 2500),
        ("0.01", "USD", 1),
        ("1200", "JPY", 1200),
        ("1200.00", "JPY", 1200),
        ("55000", "KRW", 55000),
        ("1.250", "KWD", 1250),
        ("0.005", "BHD", 5),
        ("123456789012345678901.99", "EUR", 12345678901234567890199),
    ],
)
def test_v1_amounts_convert_exactly_to_minor_units(text: str, currency: str, minor: int) -> None:
    out = migrate_v1_to_v2({"order_id": "o-1", "amount": text, "currency": currency})

    assert out["amount_minor"] == minor
    assert type(out["amount_minor"]) is int
    assert "amount" not in out


@pytest.mark.parametrize(
    ("text", "currency"),
    [
        ("25.005", "EUR"),
        ("1200.5", "JPY"),
        ("1.2505", "KWD"),
        ("-1.00", "EUR"),
        ("-0", "EUR"),
        ("abc", "EUR"),
        ("NaN", "EUR"),
        ("Infinity", "EUR"),
        ("1e3", "EUR"),
        (" 25.00", "EUR"),
        ("25,00", "EUR"),
    ],
)
def test_v1_amount_that_cannot_convert_exactly_raises(text: str, currency: str) -> None:
    state = {"order_id": "o-1", "amount": text, "currency": currency}

    with pytest.raises(StateSchemaError, match="'amount'"):
        migrate_v1_to_v2(state)
    with pytest.raises(StateSchemaError, match="'amount'"):
        REFUND_SCHEMAS.migrate(state, 1)


def test_v1_amount_inside_an_object_that_cannot_convert_names_its_key() -> None:
    state = _fixture("refund_v1_refund_eur.json")["state"]
    state["refund_request"] = {**state["refund_request"], "amount": "25.005"}

    with pytest.raises(StateSchemaError, match=r"'refund_request\.amount'"):
        migrate_v1_to_v2(state)


def test_v1_input_amount_without_any_known_currency_raises() -> None:
    with pytest.raises(StateSchemaError, match="'amount'"):
        migrate_v1_to_v2({"order_id": "o-1", "amount": "25.00"})


def test_v1_input_amount_takes_the_orders_currency_when_the_input_has_none() -> None:
    state = _fixture("refund_v1_refund_jpy.json")["state"]
    assert "currency" not in state

    out = REFUND_SCHEMAS.migrate(state, 1).state

    assert out["amount_minor"] == 1200
    assert out["order"]["amount_minor"] == 4800 and out["order"]["refunded_minor"] == 0
    assert out["refund_request"] == {"order_id": "ord-jp-003391", "amount_minor": 1200, "currency": "JPY"}


def test_v1_eur_checkpoint_converts_every_amount_and_rebinds_both_digests() -> None:
    state = _fixture("refund_v1_refund_eur.json")["state"]

    out = migrate_v1_to_v2(state)

    assert out["amount_minor"] == 2500
    assert out["order"]["amount_minor"] == 8990 and out["order"]["refunded_minor"] == 1000
    assert "amount" not in out["order"] and "refunded" not in out["order"]
    assert out["refund_request"] == {"order_id": "ord-2024-120455", "amount_minor": 2500, "currency": "EUR"}
    assert out["request_digest"] == json_digest(out["refund_request"]) != state["request_digest"]
    assert out["order_digest"] == json_digest(out["order"]) != state["order_digest"]
    assert out["approvals"] == state["approvals"]
    validate_v2(out)


def test_v1_refund_amount_converts_with_the_refunds_own_currency() -> None:
    state = _fixture("refund_v1_verify_kwd.json")["state"]

    out = REFUND_SCHEMAS.migrate(state, 1).state

    assert out["refund"]["amount_minor"] == 1250
    assert "amount" not in out["refund"]
    assert out["refund"]["refund_id"] == state["refund"]["refund_id"]
    assert out["order"]["amount_minor"] == 12500


def test_v2_to_v3_keeps_the_newest_approval_only() -> None:
    state = _fixture("refund_v2_verify_two_approvals.json")["state"]
    assert [a["status"] for a in state["approvals"]] == ["expired", "approved"]

    out = migrate_v2_to_v3(state)

    assert out["approval"] == state["approvals"][-1]
    assert out["approval"]["decided_by"] == "support:j.osei"
    assert "approvals" not in out
    validate_v3(out)


def test_v2_to_v3_with_no_approvals_asked_leaves_no_approval_key() -> None:
    state = _fixture("refund_v1_approve_pending.json")["state"]
    state = {**migrate_v1_to_v2(state), "approvals": []}

    out = migrate_v2_to_v3(state)

    assert "approval" not in out and "approvals" not in out
    validate_v3(out)


@pytest.mark.parametrize("path", OLD, ids=_ids(OLD))
def test_budgets_survive_every_migration_unchanged(path: Path) -> None:
    doc = _load(path)
    budgets = copy.deepcopy(doc["state"]["budgets"])

    out = REFUND_SCHEMAS.migrate(doc["state"], doc["state_schema_version"]).state

    assert out["budgets"] == budgets


def test_v3_state_carrying_approvals_is_rejected() -> None:
    state = _fixture("refund_v3_approve.json")["state"]
    state["approvals"] = [state["approval"]]

    with pytest.raises(StateSchemaError, match="'approvals'"):
        validate_v3(state)


def test_v2_state_carrying_approval_is_rejected() -> None:
    state = _fixture("refund_v2_verify_two_approvals.json")["state"]
    state["approval"] = state["approvals"][-1]

    with pytest.raises(StateSchemaError, match="'approval'"):
        validate_v2(state)


def test_v3_state_carrying_a_major_unit_amount_is_rejected() -> None:
    state = _fixture("refund_v3_approve.json")["state"]
    state["amount"] = "25.00"

    with pytest.raises(StateSchemaError, match="'amount'"):
        validate_v3(state)


def test_v1_state_carrying_amount_minor_in_refund_request_is_rejected() -> None:
    state = _fixture("refund_v1_refund_eur.json")["state"]
    state["refund_request"] = {**state["refund_request"], "amount_minor": 2500}
    state["request_digest"] = json_digest(state["refund_request"])

    with pytest.raises(StateSchemaError, match=r"'refund_request\.amount_minor'"):
        validate_v1(state)


def test_v1_order_carrying_refunded_minor_is_rejected() -> None:
    state = _fixture("refund_v1_approve_pending.json")["state"]
    state["order"] = {**state["order"], "refunded_minor": 0}

    with pytest.raises(StateSchemaError, match=r"'order\.refunded_minor'"):
        validate_v1(state)


def test_v3_request_digest_must_match_the_refund_request() -> None:
    state = _fixture("refund_v3_approve.json")["state"]
    state["refund_request"] = {**state["refund_request"], "amount_minor": 250000}

    with pytest.raises(StateSchemaError, match="'request_digest'"):
        validate_v3(state)


@pytest.mark.parametrize("budgets", [[], "50 steps", 50, None])
@pytest.mark.parametrize("path", KNOWN, ids=_ids(KNOWN))
def test_budgets_that_is_not_an_object_is_rejected(path: Path, budgets: Any) -> None:
    doc = _load(path)
    state = {**doc["state"], "budgets": budgets}

    with pytest.raises(StateSchemaError, match="'budgets'"):
        REFUND_SCHEMAS.validate(doc["state_schema_version"], state)


def test_state_without_order_id_is_rejected() -> None:
    state = _fixture("refund_v3_approve.json")["state"]
    del state["order_id"]

    with pytest.raises(StateSchemaError, match="'order_id'"):
        validate_v3(state)


def test_unknown_extra_keys_are_allowed() -> None:
    state = {**_fixture("refund_v3_approve.json")["state"], "trace_id": "tr-81f0", "channel": "email"}

    validate_v3(state)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("order", {"order_id": "o-1"}),
        ("approval", {"approval_id": "not-a-uuid", "status": "pending", "decided_by": None}),
        (
            "approval",
            {"approval_id": "7a3d9c52-e1b4-4f08-9d6a-3b5e2c8f1a07", "status": "maybe", "decided_by": None},
        ),
        ("decision", {"outcome": "refund", "reasons": "delivered", "decider": "rules-v1", "details": {}}),
        ("amount_minor", True),
        ("amount_minor", 0),
        ("currency", "eur"),
        ("order_digest", "md5:abc"),
    ],
)
def test_v3_optional_key_of_the_wrong_shape_is_rejected(key: str, value: Any) -> None:
    state = {**_fixture("refund_v3_approve.json")["state"], key: value}

    with pytest.raises(StateSchemaError, match=f"'{key}"):
        validate_v3(state)


def test_v3_refund_needs_its_operation_id_for_the_same_order() -> None:
    state = REFUND_SCHEMAS.migrate(_fixture("refund_v2_verify_two_approvals.json")["state"], 2).state
    other_order = {**state, "operation_id": "refund:ord-someone-else"}
    missing = {k: v for k, v in state.items() if k != "operation_id"}

    with pytest.raises(StateSchemaError, match="'operation_id'"):
        validate_v3(other_order)
    with pytest.raises(StateSchemaError, match="'operation_id'"):
        validate_v3(missing)
