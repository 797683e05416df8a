"""pytest plugin (`-p config.pytest_plugin` in pyproject's addopts): each test process's own embedded
PostgreSQL and Redis, started before pytest-django reads the settings and stopped at the end."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from config.embedded import EmbeddedServices, ensure_services

# Names this plugin exported, so an xdist worker (which inherits its controller's environment)
# knows which values are the controller's and starts services of its own instead.
EXPORTED = "PYTEST_KEEPER_EXPORTED"
_services_key = pytest.StashKey[EmbeddedServices]()


def _drop_inherited() -> None:
    for name in filter(None, os.environ.pop(EXPORTED, "").split(",")):
        os.environ.pop(name, None)


def start_test_services() -> EmbeddedServices:
    """Start what DATABASE_URL / REDIS_URL leave unset in a fresh temporary folder (deleted when they
    stop) and export the URLs; the artifacts go into that folder too unless KEEPER_ARTIFACT_ROOT is set."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _drop_inherited()
    before = dict(os.environ)
    services = ensure_services(Path(tempfile.gettempdir()), temporary=True)
    if services.delete_dirs and not os.environ.get("KEEPER_ARTIFACT_ROOT"):
        os.environ["KEEPER_ARTIFACT_ROOT"] = str(services.delete_dirs[0] / "artifacts")
    exported = [name for name, value in os.environ.items() if before.get(name) != value]
    os.environ[EXPORTED] = ",".join(exported)
    return services


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    early_config.stash[_services_key] = start_test_services()


def pytest_unconfigure(config: pytest.Config) -> None:
    services = config.stash.get(_services_key, None)
    if services is not None:
        services.stop()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # Registered after pytest-django, so these fixtures take the place of its own django_db_setup.
    config.pluginmanager.import_plugin("config.pytest_fixtures")
