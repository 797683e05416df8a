"""Importing the local or test settings starts no PostgreSQL or Redis: the entry points do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from core.processes import ROOT

SERVICE_URLS = ("DATABASE_URL", "DATABASE_OWNER_URL", "REDIS_URL", "KEEPER_BENCH_SUPERUSER_URL")


def _import_settings(module: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Import `module` in a fresh interpreter whose data and temporary folders are `tmp_path`, so any
    server it started would carry that path in its command line."""
    clean = {k: v for k, v in os.environ.items() if k not in SERVICE_URLS and not k.startswith("PYTEST_")}
    clean.update({"KEEPER_DATA_DIR": str(tmp_path), "TMPDIR": str(tmp_path), **env})
    code = f"import importlib; importlib.import_module({module!r}); print('imported')"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


def _servers_under(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(path) in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.parametrize("module", ["config.settings.local", "config.settings.test"])
def test_without_urls_the_settings_say_what_to_do_and_start_nothing(module, tmp_path):
    done = _import_settings(module, tmp_path)
    assert done.returncode != 0
    assert "DATABASE_URL is not set" in done.stderr and "make run" in done.stderr, done.stderr[-2000:]
    assert _servers_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == []  # no data folder, socket or temporary folder either


@pytest.mark.parametrize("module", ["config.settings.local", "config.settings.test"])
def test_with_urls_the_settings_import_and_start_nothing(module, tmp_path):
    done = _import_settings(
        module, tmp_path, DATABASE_URL="postgresql://app@db.example/kdb", REDIS_URL="redis://cache.example/0"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "imported"
    assert _servers_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("entry", ["config.wsgi", "config.asgi", "workers.celery"])
def test_an_empty_settings_module_means_the_default(entry):
    """DJANGO_SETTINGS_MODULE set but empty means the default, as for Keeper's own settings, instead
    of breaking every manage.py command ("No Django settings specified")."""
    code = f"import {entry}; from django.conf import settings; print(settings.SETTINGS_MODULE)"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": ""}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "config.settings.local"
