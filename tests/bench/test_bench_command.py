"""`manage.py bench` measures Keeper as production runs it, whatever DEBUG the shell has."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings


@pytest.mark.django_db
def test_the_benchmarks_run_with_debug_off_for_themselves_and_the_workers_they_start(monkeypatch):
    """With DEBUG on (manage.py's local default) every Django query would go through the debug
    cursor and into a query log, a cost no peer beside Keeper pays: the command turns it off for
    itself and for the processes it starts."""
    from bench.management.commands import bench

    seen: dict[str, object] = {}

    def figures(*, quick, progress, only):
        seen.update(debug=settings.DEBUG, env=os.environ.get("DEBUG"), logged=connection.queries_logged)
        return {"commit_step": {"quick": quick, "only": only}}

    monkeypatch.setattr(bench, "bench_all", figures)
    monkeypatch.setenv("DEBUG", "true")
    out = io.StringIO()
    with override_settings(DEBUG=True):
        assert connection.queries_logged
        call_command("bench", "--only", "commit_step", "--quick", "--json", stdout=out, stderr=io.StringIO())
    assert seen == {"debug": False, "env": "false", "logged": False}
    assert os.environ["DEBUG"] == "true"  # the caller's environment, put back
    assert json.loads(out.getvalue()) == {"commit_step": {"quick": True, "only": ["commit_step"]}}
