"""Tests: a throw-away embedded PostgreSQL and Redis per test session, short leases and sweeps."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from config.embedded import ensure_services

for _name, _value in {
    "KEEPER_LEASE_TTL": "2",
    "KEEPER_REDISPATCH_INTERVAL": "0.5",
    "KEEPER_REDISPATCH_GRACE": "1",
    "KEEPER_WORKFLOW_MODULES": "tests.workflows",
}.items():
    os.environ.setdefault(_name, _value)  # worker processes started by tests inherit these

EMBEDDED_SERVICES = ensure_services(Path(tempfile.gettempdir()), temporary=True)

from config.settings.base import *  # noqa: E402,F403

DEBUG = False
# Threads that serve HTTP in tests (live_server, the chaos sandbox) close their connections per
# request, so nothing holds the test database open when it is dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
SECRET_KEY = "insecure-test-key"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
KEEPER_ARTIFACT_ROOT = Path(
    os.environ.get("KEEPER_ARTIFACT_ROOT") or Path(tempfile.gettempdir()) / "keeper-test-artifacts"
)
# Serve static files from the apps' folders (no collectstatic in tests, so no staticfiles/ folder).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
