"""Every column that can hold text is either a registered place of erasure or declared free of a subject's data."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, connections

from core.erasure import free_columns, places, registered_columns

pytestmark = pytest.mark.django_db

TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "bytea")


def _text_columns(db: Any = connection) -> set[tuple[str, str]]:
    """Every text, varchar, json, jsonb, bytea or array-of-text column of every table in the schema."""
    with db.cursor() as cursor:
        cursor.execute(
            """SELECT c.table_name, c.column_name FROM information_schema.columns c
                 JOIN information_schema.tables t USING (table_schema, table_name)
                WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                  AND (c.data_type = ANY(%s) OR (c.data_type = 'ARRAY' AND c.udt_name IN ('_text', '_varchar', '_json', '_jsonb')))""",
            [list(TEXT_TYPES)],
        )
        return set(cursor.fetchall())


def _unaccounted(db: Any = connection) -> list[tuple[str, str]]:
    return sorted(_text_columns(db) - registered_columns() - set(free_columns()))


def test_every_text_column_is_registered_for_erasure_or_declared_free() -> None:
    columns = _text_columns()
    assert ("agent_runs", "state") in columns and ("console_audit_log", "note") in columns  # the query works
    known = registered_columns() | set(free_columns())
    missing = _unaccounted()
    assert not missing, (
        f"columns neither in the erasure registry nor declared free of personal data: {missing}"
    )
    assert not registered_columns() & set(free_columns()), "a column cannot be both a place and free"
    stale = sorted(known - columns)
    assert not stale, f"registered or declared columns that do not exist: {stale}"
    assert all(why for why in free_columns().values())  # every declaration says why


def test_every_place_has_an_eraser_or_says_why_not() -> None:
    for place in places():
        assert place.erased_by or len(place.what) > 40, place.name


@pytest.mark.django_db(databases=["default", "owner"])
def test_a_new_column_cannot_escape_the_registry() -> None:
    owner = connections["owner"]  # the role that owns the tables; its transaction is rolled back
    with owner.cursor() as cursor:
        cursor.execute("ALTER TABLE approvals ADD COLUMN customer_remark text")
        cursor.execute("CREATE TABLE runs_scratch (id bigint, blob bytea, tags text[])")
    assert _unaccounted(owner) == [
        ("approvals", "customer_remark"),
        ("runs_scratch", "blob"),
        ("runs_scratch", "tags"),
    ]
