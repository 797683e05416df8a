"""DBOS beside Keeper (bench run_e2e): workflows of trivial steps in peer processes, timed from DBOS's rows.

The parent (`dbos_steps_per_s`) creates DBOS's own database on Keeper's PostgreSQL server, starts
the peer processes (`python -m bench.peers`), lets them start their workflows together, and reads
the figures from DBOS's system tables: steps from `operation_outputs`, the window from
`workflow_status` (created_at of the first workflow to updated_at of the last).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from core.processes import ROOT, stop_groups

DBOS_DATABASE = "keeper_bench_dbos"


def dbos_missing() -> str | None:
    """Why DBOS cannot be measured here, or None."""
    if importlib.util.find_spec("dbos") is None:
        return "dbos is not installed (pip install -e '.[peers]'); the DBOS figures are null"
    return None


def _sqlalchemy_url(settings_dict: dict[str, Any], dbname: str) -> str:
    user = quote(str(settings_dict.get("USER") or ""), safe="")
    password = quote(str(settings_dict.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else f"{user}@"
    host, port = str(settings_dict.get("HOST") or ""), str(settings_dict.get("PORT") or "")
    if host.startswith("/"):  # a unix socket folder
        query = f"?host={quote(host, safe='/')}" + (f"&port={port}" if port else "")
        return f"postgresql://{auth}/{dbname}{query}"
    return f"postgresql://{auth}{host}{':' + port if port else ''}/{dbname}"


def _libpq(settings_dict: dict[str, Any], dbname: str) -> str:
    from psycopg.conninfo import make_conninfo

    parts = {k.lower(): settings_dict.get(k) for k in ("USER", "PASSWORD", "HOST", "PORT")}
    return make_conninfo(dbname=dbname, **{k: str(v) for k, v in parts.items() if v})


def _fresh_database(settings_dict: dict[str, Any], *, create: bool = True) -> None:
    """DBOS's own database on the same server, empty (dropped and created by a role that may);
    without `create`, only dropped (the benchmark leaves nothing behind)."""
    with psycopg.connect(_libpq(settings_dict, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DBOS_DATABASE)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBOS_DATABASE)))


def dbos_steps_per_s(
    *,
    settings_dict: dict[str, Any],
    workflows: int,
    steps: int,
    processes: int,
    together: bool,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """`workflows` DBOS workflows of `steps` steps each, spread over `processes` peer processes, each
    running one workflow at a time or, `together`, all of its share at once on DBOS's threads."""
    _fresh_database(settings_dict)
    url = _sqlalchemy_url(settings_dict, DBOS_DATABASE)
    env = {**os.environ, "DBOS_BENCH_SYSTEM_DATABASE_URL": url}
    share = [workflows // processes + (1 if i < workflows % processes else 0) for i in range(processes)]
    procs: list[subprocess.Popen[str]] = []
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile(mode="w+")) for _ in share]
        try:
            for i, count in enumerate(share):
                args = [
                    "-m",
                    "bench.peers",
                    "--workflows",
                    str(count),
                    "--steps",
                    str(steps),
                    "--name",
                    f"p{i}",
                ]
                procs.append(
                    subprocess.Popen(
                        [sys.executable, *args],
                        cwd=ROOT,
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=logs[i],
                        text=True,
                        start_new_session=True,
                    )
                )
            for proc, log in zip(procs, logs, strict=True):  # every peer launched DBOS before any starts
                line = proc.stdout.readline() if proc.stdout else ""
                if line.strip() != "ready":
                    raise RuntimeError(f"a DBOS peer did not start: {line!r} {_tail(log)}")
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            ids: list[str] = []
            for proc, log in zip(procs, logs, strict=True):
                out, _ = proc.communicate(timeout=600)
                if proc.returncode != 0:
                    raise RuntimeError(f"a DBOS peer failed: {_tail(log)}")
                ids += json.loads(out.strip().splitlines()[-1])["workflow_ids"]
        finally:
            stop_groups(procs, grace=5)  # type: ignore[arg-type]
    try:
        return _figures(settings_dict, ids, progress)
    finally:
        _fresh_database(settings_dict, create=False)


def _tail(log: IO[str]) -> str:
    log.seek(0)
    return log.read()[-2000:]


def _figures(
    settings_dict: dict[str, Any], ids: list[str], progress: Callable[[str], None]
) -> dict[str, Any]:
    with psycopg.connect(_libpq(settings_dict, DBOS_DATABASE)) as conn:
        steps = conn.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = ANY(%s)", [ids]
        ).fetchone()
        rows = conn.execute(
            "SELECT created_at, updated_at, status FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)",
            [ids],
        ).fetchall()
    done = [r for r in rows if r[2] == "SUCCESS"]
    if len(done) != len(ids) or steps is None:
        raise RuntimeError(f"DBOS finished {len(done)} of {len(ids)} workflows")
    window_ms = max(r[1] for r in done) - min(r[0] for r in done)
    per_run = [r[1] - r[0] for r in done]
    rate = steps[0] / (window_ms / 1000) if window_ms else None
    progress(f"run_e2e DBOS: {len(done)} workflows, {steps[0]} steps in {window_ms} ms")
    return {
        "steps": steps[0],
        "runs": len(done),
        "steps_per_s": round(rate, 1) if rate else None,
        "p50_run_ms": round(statistics.median(per_run), 1),
    }


def _peer(workflows: int, steps: int, name: str, together: bool) -> None:
    """One peer process: launch DBOS, wait for `go`, run the workflows, print their ids."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "keeper-bench",
            "system_database_url": os.environ["DBOS_BENCH_SYSTEM_DATABASE_URL"],
            "executor_id": name,
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def tick(remaining: int) -> int:
        return remaining - 1

    @DBOS.workflow()
    def countdown(n: int) -> int:
        remaining = n
        for _ in range(n):
            remaining = tick(remaining)
        return remaining

    DBOS.launch()
    print("ready", flush=True)
    sys.stdin.readline()
    if together:  # all at once on DBOS's executor threads
        handles = [DBOS.start_workflow(countdown, steps) for _ in range(workflows)]
        for handle in handles:
            handle.get_result()
    else:  # one at a time, as a Celery pool process runs one task at a time
        handles = []
        for _ in range(workflows):
            handles.append(DBOS.start_workflow(countdown, steps))
            handles[-1].get_result()
    print(json.dumps({"workflow_ids": [h.get_workflow_id() for h in handles]}), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--name", default="p0")
    parser.add_argument("--together", action="store_true", help="start every workflow at once (threads)")
    options = parser.parse_args()
    _peer(options.workflows, options.steps, options.name, options.together)
