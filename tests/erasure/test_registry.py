"""Every column that can hold text is either a registered place of erasure or declared free of a subject's data."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections

from erasure.registry import Eraser, erasers, free_columns, places, registered_columns

pytestmark = pytest.mark.django_db

TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "bytea")


def _text_columns(db: Any = connection) -> set[tuple[str, str]]:
    """Every text, varchar, json, jsonb, bytea or array-of-text column of every table in the schema
    (partitions aside)."""
    with db.cursor() as cursor:
        cursor.execute(
            """SELECT c.table_name, c.column_name FROM information_schema.columns c
                 JOIN information_schema.tables t USING (table_schema, table_name)
                WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                  -- a partition's columns are its table's, erased through it
                  AND c.table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)
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


def test_every_place_has_an_eraser_or_says_what_to_do() -> None:
    names = {e.name for e in erasers()}
    for place in places():
        assert place.erased_by in names or (place.erased_by == "" and len(place.remedy) > 40), place.name


def test_every_eraser_of_the_package_is_named_in_the_setting_and_the_memory_goes_last() -> None:
    """settings.ERASERS is the one place that says who erases what: an eraser written in
    erasure/erasers/ but left out of it would never run, and its places never be scanned."""
    import importlib
    import inspect
    import pkgutil

    import erasure.erasers

    written = {
        f"{module.name}.{cls.__name__}"
        for module in pkgutil.iter_modules(erasure.erasers.__path__, "erasure.erasers.")
        for cls in vars(importlib.import_module(module.name)).values()
        if inspect.isclass(cls)
        and issubclass(cls, Eraser)
        and cls is not Eraser
        and cls.__module__ == module.name
    }
    assert written == set(settings.ERASERS)
    assert [e.name for e in erasers() if e.last] == ["memory"] and erasers()[-1].name == "memory"


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
