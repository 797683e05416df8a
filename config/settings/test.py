"""Tests: short leases and sweeps; the session's embedded services come from config.pytest_plugin."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path


def _keeper_test_workflows() -> str:
    """Keeper's own test workflows when this is Keeper's checkout; a project that tests its own
    workflows with these settings (the test kit) has no tests.workflows."""
    try:
        return "tests.workflows" if importlib.util.find_spec("tests.workflows") is not None else ""
    except ImportError:
        return ""


for _name, _value in {
    "KEEPER_LEASE_TTL": "2",
    "KEEPER_REDISPATCH_INTERVAL": "0.5",
    "KEEPER_REDISPATCH_GRACE": "1",
    "KEEPER_WORKFLOW_MODULES": _keeper_test_workflows(),
    "KEEPER_WEBHOOKS_INTERVAL": "0.5",
    "KEEPER_WEBHOOKS_BACKOFF": "0.2",
    "KEEPER_WEBHOOKS_TIMEOUT": "2",
    "KEEPER_SCHEDULE_MIN_INTERVAL": "1",  # schedules that fire within a test
}.items():
    os.environ.setdefault(_name, _value)  # worker processes started by tests inherit these

from config.settings.base import *  # noqa: E402,F403

DEBUG = False
# Threads that serve HTTP in tests (live_server, the chaos sandbox) close their connections per
# request, so nothing holds the test database open when it is dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
SECRET_KEY = "insecure-test-key"
KEEPER_DIGEST_KEY = os.environ.get("KEEPER_DIGEST_KEY") or "insecure-test-digest-key"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The plugin points this into the session's temporary folder (one per xdist worker).
KEEPER_ARTIFACT_ROOT = Path(
    os.environ.get("KEEPER_ARTIFACT_ROOT") or Path(tempfile.gettempdir()) / "keeper-test-artifacts"
)
if BACKENDS["artifact_store"]["BACKEND"].endswith(".LocalArtifactStore"):  # noqa: F405
    BACKENDS["artifact_store"]["OPTIONS"]["root"] = str(KEEPER_ARTIFACT_ROOT)  # noqa: F405
# Serve static files from the apps' folders (no collectstatic in tests, so no staticfiles/ folder).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
