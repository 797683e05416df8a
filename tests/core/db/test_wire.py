"""core.db.wire: statements sent through libpq on Django's connection, each carrying its tenant."""

from __future__ import annotations

import contextlib
import uuid

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from core.db import wire

pytestmark = pytest.mark.django_db(transaction=True)

# The array back as text: its length, then each element in hex (NULL as NULL), in order.
_ECHO = (
    "SELECT coalesce(array_length($1::bytea[], 1), 0)::text || ':' || coalesce(("
    " SELECT string_agg(coalesce(encode(b, 'hex'), 'NULL'), ',' ORDER BY i)"
    " FROM unnest($1::bytea[]) WITH ORDINALITY AS u(b, i)), '')"
)


def _prepared(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = %s", [name])
        return bool(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], "0:"),
        ([b"\x00\x01"], "1:0001"),
        ([b"", None, b"\xff" * 3], "3:,NULL,ffffff"),
    ],
)
def test_bytea_array_arrives_as_postgresql_reads_it(values: list[bytes | None], expected: str) -> None:
    echo = wire.Statement("keeper_test_echo", _ECHO, params=1, binary=[0])
    assert echo.first_value([wire.bytea_array(values)]) == expected.encode()


def test_statement_is_prepared_once_and_again_after_the_session_forgot_it() -> None:
    echo = wire.Statement("keeper_test_again", "SELECT $1::int + 1", params=1)
    assert echo.first_value([b"41"]) == b"42"
    assert _prepared("keeper_test_again")
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as a pooler's DISCARD ALL would
    assert echo.first_value([b"1"]) == b"2"
    assert _prepared("keeper_test_again")


def test_inside_a_transaction_the_statement_runs_unprepared_so_a_forgotten_one_cannot_break_it() -> None:
    echo = wire.Statement("keeper_test_tx", "SELECT $1::int", params=1)
    assert echo.first_value([b"7"]) == b"7"
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as psycopg does after a rollback
    with transaction.atomic():
        assert echo.first_value([b"8"]) == b"8"
        assert not _prepared("keeper_test_tx")
    assert echo.first_value([b"9"]) == b"9"  # in autocommit it is prepared again
    assert _prepared("keeper_test_tx")


def test_errors_are_djangos_and_the_connection_stays_usable() -> None:
    cast = wire.Statement("keeper_test_cast", "SELECT $1::int", params=1)
    with pytest.raises(DatabaseError, match="invalid input syntax"):
        cast.first_value([b"not a number"])
    assert cast.first_value([b"3"]) == b"3"
    assert wire.Statement("keeper_test_none", "SELECT 1 WHERE false", params=0).first_value([]) is None


def test_without_prepared_statements_nothing_is_prepared(settings: object) -> None:
    settings.KEEPER_PREPARED_STATEMENTS = False  # type: ignore[attr-defined]
    unnamed = wire.Statement("keeper_test_unnamed", "SELECT $1::text || '!'", params=1)
    assert unnamed.first_value([b"hi"]) == b"hi!"
    assert not _prepared("keeper_test_unnamed")


def test_the_first_statement_of_an_atomic_block_runs_inside_its_transaction() -> None:
    local = wire.Statement("keeper_test_local", "SELECT set_config('keeper.test_wire', $1, true)", params=1)
    with transaction.atomic():
        assert local.first_value([b"inside"]) == b"inside"  # transaction-local: gone if autocommitted
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('keeper.test_wire', true)")
            assert cursor.fetchone()[0] == "inside"


def test_named_placeholders_become_typed_numbered_parameters() -> None:
    statement = wire.Statement.named(
        "keeper_test_named",
        "SELECT pg_typeof(%(a)s)::text || ',' || pg_typeof(%(b)s)::text || ',' || (%(a)s + %(c)s)::text"
        " || ',' || coalesce(%(d)s::text, 'null') || ',' || %(e)s::text",
        {"a": wire.INT8, "b": wire.UUID, "c": wire.FLOAT8, "d": wire.BOOL, "e": wire.BOOL},
    )
    assert statement.names == ["a", "b", "c", "d", "e"]
    value = statement.first_value_of(
        {"a": 2, "b": uuid.UUID(int=1), "c": 0.5, "d": None, "e": False, "unused": "ignored"}
    )
    assert value == b"bigint,uuid,2.5,null,false"


def test_a_named_statement_without_a_type_for_each_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no type for \['b'\]"):
        wire.Statement.named("keeper_test_untyped", "SELECT %(a)s, %(b)s", {"a": wire.TEXT})


def test_a_rollback_that_makes_psycopg_deallocate_everything_does_not_lose_the_statement() -> None:
    echo = wire.Statement("keeper_test_rollback", "SELECT $1::int * 2", params=1)
    assert echo.first_value([b"2"]) == b"4"
    raw = connection.connection
    with contextlib.suppress(RuntimeError), transaction.atomic():
        psycopg.Cursor(raw).execute("SELECT 1", prepare=True)  # psycopg now holds a statement too
        raise RuntimeError  # its rollback: psycopg sends DEALLOCATE ALL
    assert echo.first_value([b"3"]) == b"6"
    assert _prepared("keeper_test_rollback")
