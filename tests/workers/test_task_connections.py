"""A worker keeps its database connection from one task to the next, as a web process does between
requests: Celery's Django fixup would close it around every task (a new PostgreSQL backend per task)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import psycopg
import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection, transaction

from core.processes import current_database_url
from workers.celery import _close_old_connections, app

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def max_age() -> Iterator[None]:
    """The connection opened as `make run` opens it (CONN_MAX_AGE 60; tests use 0)."""
    before = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = 60
    connection.close()
    connection.ensure_connection()
    yield
    connection.settings_dict["CONN_MAX_AGE"] = before
    connection.close()


def _backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_celerys_fixup_leaves_the_connection_open_after_a_task(max_age: None) -> None:
    backend = _backend()
    fixup = DjangoWorkerFixup(app)
    fixup.close_database()  # what on_task_prerun and on_task_postrun call
    fixup.close_database()
    assert connection.connection is not None
    assert _backend() == backend


def test_djangos_own_policy_still_applies_around_tasks(max_age: None) -> None:
    backend = _backend()
    _close_old_connections()
    assert _backend() == backend  # young and healthy: kept
    connection.close_at = 0.0  # as if CONN_MAX_AGE had passed
    _close_old_connections()
    assert connection.connection is None
    assert _backend() != backend


def test_an_unusable_connection_is_not_handed_to_the_next_task(max_age: None) -> None:
    backend = _backend()
    with psycopg.connect(current_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [backend])  # the server end goes away
    connection.errors_occurred = True  # as a task's failed query leaves it
    _close_old_connections()
    assert connection.connection is None
    assert _backend() != backend


def test_a_task_run_eagerly_leaves_the_callers_transaction_alone(max_age: None) -> None:
    eager = SimpleNamespace(request=SimpleNamespace(is_eager=True))
    with transaction.atomic():  # autocommit off: Django's policy would close this connection
        backend = _backend()
        _close_old_connections(sender=eager)
        assert connection.connection is not None
        assert _backend() == backend
