"""The test plugin gives each xdist worker its own embedded PostgreSQL, Redis and artifact folder
(so a test that flushes Redis touches only its own) and stops them all when the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from core.processes import ROOT

RECORDER = """
import json, os

import pytest


@pytest.mark.parametrize("n", range(8))
def test_record(n):
    from django.conf import settings

    names = ("PYTEST_XDIST_WORKER", "DATABASE_URL", "REDIS_URL", "KEEPER_ARTIFACT_ROOT")
    with open(os.environ["RECORD"], "a") as out:
        out.write(json.dumps([settings.SETTINGS_MODULE, *(os.environ[name] for name in names)]) + "\\n")
"""


def test_each_xdist_worker_has_its_own_services_and_all_stop_at_the_end(tmp_path: Path):
    (tmp_path / "test_recorder.py").write_text(RECORDER)
    record = tmp_path / "record.jsonl"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_")
        and k not in {"DATABASE_URL", "DATABASE_OWNER_URL", "REDIS_URL", "KEEPER_ARTIFACT_ROOT"}
    }
    env.update({"TMPDIR": str(tmp_path), "RECORD": str(record)})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "--rootdir", str(ROOT)]
        + ["-c", str(ROOT / "pyproject.toml"), str(tmp_path / "test_recorder.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert {row[0] for row in rows} == {"config.settings.test"}  # pyproject's, not the Celery app's default
    by_worker = {worker: (db, redis, artifacts) for _, worker, db, redis, artifacts in rows}
    assert sorted(by_worker) == ["gw0", "gw1"]
    (db0, redis0, art0), (db1, redis1, art1) = by_worker.values()
    assert db0 != db1 and redis0 != redis1 and art0 != art1
    assert all(str(tmp_path) in url for url in (db0, db1, redis0, redis1, art0, art1))
    leftovers = [
        " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline"])
        if str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("keeper-")] == []  # folders deleted
