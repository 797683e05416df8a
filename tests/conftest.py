from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.tenancy import tenant_bind, tenant_ensure, tenant_unbound
from tests.chat_server import chat  # noqa: F401 - the fixture, for every test module
from tests.pooling import database_path, pgbouncer, through_pgbouncer  # noqa: F401 - likewise
from tests.processes import ProcessGroup, flush_redis


@pytest.fixture
def tenant(db):
    """Acme, bound to the test's connection like a worker's task (row-level security shows its
    rows to the test's own queries); code that works for another tenant sets that one itself."""
    acme = tenant_ensure(slug="acme", name="Acme")
    with tenant_bind(acme.tenant_id):
        yield acme


@contextmanager
def no_tenant() -> Iterator[None]:
    """No tenant for the block's statements (as a fresh request or task starts)."""
    with tenant_unbound():
        yield


@pytest.fixture
def other_tenant(db):
    return tenant_ensure(slug="globex", name="Globex")


@pytest.fixture
def processes(request, transactional_db, tmp_path: Path) -> Iterator[ProcessGroup]:
    """Real worker/beat processes on committed data; all killed (SIGKILL, by group) at the end."""
    flush_redis()
    group = ProcessGroup(tmp_path)
    try:
        yield group
    finally:
        group.kill_all()
        flush_redis()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(group.logs())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
