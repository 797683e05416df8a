"""Fixtures of config.pytest_plugin, registered after pytest-django's (whose django_db_setup the
first replaces): the test database as Keeper's tests and workflow authors' tests use it, and the
test kit's one fixture, `keeper_env` (runs.authoring.testing)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """The test database is created and migrated by the owner role; the tests, like the app, then
    use the application role on it (so row-level security binds them as it binds production)."""
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases=["owner"])
        connections["default"].settings_dict["NAME"] = connections["owner"].settings_dict["NAME"]
        connections["default"].close()
    yield
    with django_db_blocker.unblock():
        connections["default"].close()
        teardown_databases(config, verbosity=0)


@pytest.fixture(scope="session")
def _keeper_test_clock(django_db_setup, django_db_blocker) -> None:
    """The test database's clock, which a test can move (runs.authoring._clock); installed once."""
    from runs.authoring.testing import clock_install

    with django_db_blocker.unblock():
        clock_install()


@pytest.fixture
def keeper_env(_keeper_test_clock, transactional_db):
    """A test's Keeper (runs.authoring.testing.KeeperEnv): start runs of the workflows registered in
    this process, drive them through the real engine, move the clock, fake the tools, send approvals
    and signals, and assert on the runs' events, operations and state."""
    from runs.authoring.testing import keeper_env_open

    with keeper_env_open() as env:
        yield env
