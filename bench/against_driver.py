"""One side of `python -m bench.against`, run as __main__ by `manage.py shell` in either tree (the
file is this tree's; the modules it imports are the tree's it runs in), so it uses only what both
have: bench.runs' commit rounds and countdowns, core.processes, core.tenancy.

First the commit_step rounds (the engine's commits, then the raw statement's), then, on this tree's
own Celery worker, the run_e2e batches; after each round the turn goes to the other side. Prints
one line, AGAINST <json>, with every round's figures.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import IO, Any

from django.conf import settings
from django.db import connection

from bench import runs as b
from core.processes import (
    celery_worker_args,
    celery_worker_env,
    current_database_url,
    start_python,
    stop_groups,
)
from core.tenancy import tenant_bind, tenant_ensure

STEPS = 20  # a countdown of 20 is 22 steps, as make bench's run_e2e
FAILED = "-"  # the turn of a side that stopped: the other stops too instead of waiting


def wait_turn(turn_file: str, me: str, patience: float) -> None:
    deadline = time.monotonic() + patience
    while True:
        try:
            with open(turn_file) as turn:
                holder = turn.read().strip()
            if holder == me:
                return
            if holder == FAILED:
                raise SystemExit(f"{me}: the other side stopped")
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{me}: the other side did not hand over its turn in {patience:.0f} s")
        time.sleep(0.02)


def give_turn(turn_file: str, me: str, other: str) -> None:
    with open(f"{turn_file}.{me}", "w") as turn:
        turn.write(other)
    os.replace(f"{turn_file}.{me}", turn_file)


def tell(turn_file: str, line: str) -> None:
    """A line for the command's progress (python -m bench.against shows it as it comes)."""
    with open(f"{turn_file}.progress", "a") as progress:
        progress.write(line + "\n")


def cpu_s(root: int | None) -> float | None:
    """User + system seconds of a process and of its children, live and reaped (None without /proc).
    bench.runs has the same reading since after c9db2ea; here so that trees before it run this too."""
    if root is None or not os.path.isdir("/proc"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    spent: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
            spent[int(entry)] = sum(int(v) for v in fields[11:15]) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def server_pid() -> int | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    try:
        with open(f"/proc/{backend}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def per_step(start: float | None, end: float | None, steps: int) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000 / steps, 3)


def main() -> None:
    me, other, turn = os.environ["AGAINST_ME"], os.environ["AGAINST_OTHER"], os.environ["AGAINST_TURN"]
    rounds_wanted, runs, ops = (int(os.environ[f"AGAINST_{name}"]) for name in ("ROUNDS", "RUNS", "OPS"))
    patience = float(os.environ.get("AGAINST_PATIENCE", "900"))  # the other side's turn, at most
    with tempfile.NamedTemporaryFile(prefix="keeper-against-worker-", suffix=".log") as log:
        rounds = _rounds(me, other, turn, rounds_wanted, runs, ops, patience, log)
    print(
        "AGAINST " + json.dumps({"side": me, "slice_ms": settings.KEEPER_SLICE_MS, "rounds": rounds}),
        flush=True,
    )


def _rounds(
    me: str, other: str, turn: str, rounds_wanted: int, runs: int, ops: int, patience: float, log: IO[bytes]
) -> list[dict[str, Any]]:
    tenant = tenant_ensure(slug="bench")
    rounds: list[dict[str, Any]] = [{} for _ in range(rounds_wanted)]
    worker = None
    try:
        with tenant_bind(tenant.tenant_id):
            # commit_step first, with no worker running (it would take the round's run, which the
            # round leases itself), as make bench runs it; the warm-ups take turns too.
            wait_turn(turn, me, patience)
            b._engine_round(min(ops, 50))
            b._raw_round(min(ops, 50), current_database_url())
            give_turn(turn, me, other)
            for done, figures in enumerate(rounds, 1):
                wait_turn(turn, me, patience)
                engine = b._engine_round(ops)
                raw = b._raw_round(ops, current_database_url())
                give_turn(turn, me, other)
                figures["commit_step_engine_ops_s"] = round(ops / sum(engine), 1)
                figures["commit_step_raw_ops_s"] = round(ops / sum(raw), 1)
                tell(
                    turn,
                    f"{me}: commit_step round {done}/{rounds_wanted}: engine "
                    f"{figures['commit_step_engine_ops_s']} commits/s, raw {figures['commit_step_raw_ops_s']}",
                )
            env = {
                **os.environ,
                "DATABASE_URL": current_database_url(),
                "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
            }
            pool, concurrency = settings.CELERY_WORKER_POOL, settings.CELERY_WORKER_CONCURRENCY
            worker = start_python(
                celery_worker_args("bench", concurrency=concurrency, pool=pool),
                env={**env, **celery_worker_env(pool)},
                log=log,
            )
            wait_turn(turn, me, patience)
            b._countdowns_done(b._countdowns(tenant, 1, STEPS), timeout=180, log=log.name)
            b._countdowns_done(b._countdowns(tenant, runs, STEPS), timeout=600, log=log.name)
            server = server_pid()
            give_turn(turn, me, other)
            for done, figures in enumerate(rounds, 1):
                wait_turn(turn, me, patience)
                cpu = cpu_s(worker.pid), cpu_s(server)
                batch = b._event_figures(
                    b._countdowns_done(b._countdowns(tenant, runs, STEPS), timeout=600, log=log.name)
                )
                after = cpu_s(worker.pid), cpu_s(server)
                give_turn(turn, me, other)
                figures["run_e2e_steps_per_s"] = batch["steps_per_s"]
                figures["worker_cpu_ms_per_step"] = per_step(cpu[0], after[0], batch["steps"])
                figures["postgres_cpu_ms_per_step"] = per_step(cpu[1], after[1], batch["steps"])
                tell(turn, f"{me}: run_e2e round {done}/{rounds_wanted}: {batch['steps_per_s']} steps/s")
    except BaseException:
        give_turn(turn, me, FAILED)
        raise
    finally:
        if worker is not None:
            stop_groups([worker], grace=5)
    return rounds


if __name__ == "__main__":
    main()
