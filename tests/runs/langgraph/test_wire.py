"""runs.langgraph.wire: the checkpoint put's statement, sent through libpq on Django's connection."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from runs.langgraph import wire

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


def test_a_forgotten_statement_inside_a_transaction_is_an_error_not_a_silent_retry() -> None:
    echo = wire.Statement("keeper_test_tx", "SELECT $1::int", params=1)
    assert echo.first_value([b"7"]) == b"7"
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with pytest.raises(DatabaseError, match="keeper_test_tx"), transaction.atomic():
        echo.first_value([b"7"])
    assert echo.first_value([b"8"]) == b"8"  # outside the transaction it is prepared again


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
