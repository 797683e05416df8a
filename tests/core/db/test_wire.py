"""core.db.wire: statements sent through libpq on Django's connection, each carrying its tenant."""

from __future__ import annotations

import contextlib
import uuid

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, OperationalError, connection, transaction

from core.db import wire
from core.processes import current_database_url
from core.tenancy import tenant_bind

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


def test_first_row_is_loaded_as_a_cursor_of_the_connection_loads_it() -> None:
    sql = "SELECT %(id)s, %(n)s, statement_timestamp(), '{\"a\": 1}'::jsonb, %(absent)s"
    statement = wire.Statement.named(
        "keeper_test_row", sql, {"id": wire.UUID, "n": wire.INT8, "absent": wire.TEXT}
    )
    run_id = uuid.uuid4()
    row = statement.first_row_of({"id": run_id, "n": 2**40, "absent": None})
    assert row is not None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT %s::uuid, %s::int8, statement_timestamp(), '{\"a\": 1}'::jsonb, NULL", [run_id, 2**40]
        )
        expected = cursor.fetchone()
    assert [type(value) for value in row] == [type(value) for value in expected]
    assert row[:2] == (run_id, 2**40) and row[3] == expected[3] and row[4] is None
    assert row[2].tzinfo is not None
    empty = wire.Statement.named("keeper_test_none", "SELECT 1 WHERE %(no)s", {"no": wire.BOOL})
    assert empty.first_row_of({"no": False}) is None


def test_a_deferred_constraint_failing_at_the_implicit_commit_is_djangos_error() -> None:
    """Django's foreign keys are checked at commit: in autocommit that is the pipeline's Sync, after
    the statement has answered its rows."""
    insert = wire.Statement.named(
        "keeper_test_deferred",
        "INSERT INTO agent_runs (run_id, tenant_id, workflow_name, workflow_version, state_schema_version,"
        " status, next_step, state, state_revision, suspend_detail, lease_epoch, attempt, input_digest,"
        " suspend_reason, resume_requested_by, subject, state_digest, replay, created_at, updated_at)"
        " VALUES (%(id)s, %(tenant)s, 'w', '1', 1, 'running', 's', '{}', 1, '', 0, 0, '', NULL, '', '', '',"
        " false, now(), now()) RETURNING run_id",
        {"id": wire.UUID, "tenant": wire.UUID},
    )
    tenant_id = uuid.uuid4()  # no such tenant
    with tenant_bind(tenant_id), pytest.raises(IntegrityError, match="agent_runs_tenant_id"):
        insert.first_row_of({"id": uuid.uuid4(), "tenant": tenant_id})
    assert wire.Statement("keeper_test_after", "SELECT 1", params=0).first_value([]) == b"1"


class _Counting:
    """A PGconn that counts the calls which release the interpreter lock (psycopg's C implementation
    releases it around PQisBusy and PQnotifies, as around sending)."""

    def __init__(self, pgconn: psycopg.pq.abc.PGconn):
        self._pgconn = pgconn
        self.is_busy_calls = 0
        self.notifies_calls = 0

    def is_busy(self) -> int:
        self.is_busy_calls += 1
        return self._pgconn.is_busy()

    def notifies(self) -> object:
        self.notifies_calls += 1
        return self._pgconn.notifies()

    def __getattr__(self, name: str) -> object:
        return getattr(self._pgconn, name)


def _pipeline(raw: psycopg.Connection, *commands: bytes) -> tuple[list[psycopg.pq.abc.PGresult], _Counting]:
    pgconn = raw.pgconn
    counting = _Counting(pgconn)
    pgconn.enter_pipeline_mode()
    try:
        for command in commands:
            pgconn.send_query_params(command, None)
        pgconn.pipeline_sync()
        return raw.wait(wire._pipeline_results(counting)), counting  # type: ignore[arg-type]
    finally:
        pgconn.exit_pipeline_mode()


def test_a_pipeline_is_read_asking_libpq_only_while_a_result_may_be_on_its_way() -> None:
    """Every call that releases the interpreter lock hands it to another of a worker's threads, and
    this one queues to take it back: after a result libpq answers the end of its results without
    reading, so only a command still to come is asked about, and notifications are left to psycopg."""
    with psycopg.connect(current_database_url(), autocommit=True) as raw:
        results, counting = _pipeline(raw, b"SELECT 1", b"SELECT 2", b"SELECT 3")
        assert [r.get_value(0, 0) for r in results] == [b"1", b"2", b"3"]
        # one ask per command still to come, and one while the first answer is on its way
        assert counting.is_busy_calls <= 3 + 1, counting.is_busy_calls
        assert counting.notifies_calls == 0
        failed, _ = _pipeline(raw, b"SELECT 1/0", b"SELECT 2")  # the second is skipped, reported so
        assert [r.status for r in failed] == [psycopg.pq.ExecStatus.FATAL_ERROR,
                                              psycopg.pq.ExecStatus.PIPELINE_ABORTED]  # fmt: skip
        assert _pipeline(raw, b"SELECT 4")[0][0].get_value(0, 0) == b"4"  # the connection is usable


def test_a_connection_lost_under_a_statement_is_an_error_not_a_hang() -> None:
    echo = wire.Statement("keeper_test_lost", "SELECT $1::int", params=1, types=[wire.INT4])
    assert echo.first_value([b"1"]) == b"1"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    with psycopg.connect(current_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [backend])
    with pytest.raises(OperationalError):
        echo.first_value([b"2"])
    connection.close()
    assert echo.first_value([b"3"]) == b"3"  # a new connection prepares it again


def test_a_parameter_larger_than_the_sockets_buffer_is_sent_whole() -> None:
    length = wire.Statement("keeper_test_length", "SELECT length($1)", params=1, types=[wire.TEXT])
    assert length.first_value([b"x" * (8 << 20)]) == str(8 << 20).encode()
