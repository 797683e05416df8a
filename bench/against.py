"""python -m bench.against REV: commit_step and run_e2e of this tree against another revision, from
one run (make bench-against REV=...).

On a shared machine the same tree's steps per second swing by a fifth within minutes, so two
`make bench` runs an hour apart (or a minute apart) cannot say whether a change made Keeper slower.
Here both trees run at once, each on its own fresh database, Redis and Celery worker, and take
turns: a round of one, then a round of the other, and so on (commit_step's rounds first, then, each
on its tree's worker, run_e2e's batches). Each of this tree's rounds is compared with the other's
rounds just before and after it, so the machine's drift cancels out of the ratios, and the ratios'
geometric mean comes with a 95% interval (a bootstrap over the rounds).

REV is checked out in a git worktree under a temporary folder and run with this tree's interpreter,
so it needs the same dependencies; the driver (bench/against_driver.py) uses only what the trees
from round 3 on have. Nothing touches this tree's own .data.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).resolve().with_name("against_driver.py")
FIGURES = (
    ("commit_step_engine_ops_s", "commit_step, engine commits/s", True),
    ("commit_step_raw_ops_s", "commit_step, raw statement commits/s", True),
    ("run_e2e_steps_per_s", "run_e2e, steps/s", True),
    ("worker_cpu_ms_per_step", "run_e2e, worker CPU ms per step", False),
    ("postgres_cpu_ms_per_step", "run_e2e, PostgreSQL CPU ms per step", False),
)
_SERVICES = ("DATABASE_URL", "DATABASE_OWNER_URL", "REDIS_URL", "KEEPER_BENCH_SUPERUSER_URL")


class AgainstError(Exception):
    pass


def paired_ratios(this: Sequence[float | None], other: Sequence[float | None]) -> list[float]:
    """This tree's round i over the mean of the other's rounds i and i + 1 (the other went first, so
    they are the rounds just before and after it); rounds without a figure are left out."""
    ratios = []
    for i, value in enumerate(this):
        around = [v for v in other[i : i + 2] if v]
        if value and around:
            ratios.append(value / statistics.mean(around))
    return ratios


def geometric_interval(
    ratios: Sequence[float], *, resamples: int = 4000, seed: int = 1
) -> tuple[float, float, float]:
    """The ratios' geometric mean and a 95% bootstrap interval of it (the same figures for the same ratios)."""
    if not ratios:
        raise ValueError("no ratios")
    logs = [math.log(r) for r in ratios]
    pick = random.Random(seed)
    means = sorted(statistics.fmean(pick.choices(logs, k=len(logs))) for _ in range(resamples))
    low, high = means[int(resamples * 0.025)], means[int(resamples * 0.975) - 1]
    return math.exp(statistics.fmean(logs)), math.exp(low), math.exp(high)


def compare(this: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Medians of both sides and this/other ratios for every figure the two sides have."""
    out: dict[str, Any] = {}
    for key, _label, _higher_is_better in FIGURES:
        mine = [r.get(key) for r in this["rounds"]]
        theirs = [r.get(key) for r in other["rounds"]]
        ratios = paired_ratios(mine, theirs)
        if not ratios:
            continue
        mean, low, high = geometric_interval(ratios)
        out[key] = {
            "this_median": statistics.median(v for v in mine if v),
            "other_median": statistics.median(v for v in theirs if v),
            "ratio": round(mean, 3),
            "ratio_low": round(low, 3),
            "ratio_high": round(high, 3),
            "pairs": len(ratios),
        }
    return out


def _git(*args: str) -> str:
    found = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if found.returncode != 0:
        raise AgainstError(f"git {' '.join(args)}: {found.stderr.strip() or found.stdout.strip()}")
    return found.stdout.strip()


def _side_env(data: Path, tree: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SERVICES and k != "DJANGO_SETTINGS_MODULE"}
    return {**env, "KEEPER_DATA_DIR": str(data), "PYTHONPATH": str(tree), "DEBUG": "false", **extra}


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """Interrupt the sides (each stops its worker and its embedded services on the way out)."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + 60
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _relay(path: Path, told: int, progress: Callable[[str], None]) -> int:
    """The sides' progress lines written since `told` (an offset in the file), passed on whole."""
    try:
        with open(path, "rb") as lines:
            lines.seek(told)
            written = lines.read()
    except OSError:
        return told
    whole = written[: written.rfind(b"\n") + 1]
    for line in whole.decode(errors="replace").splitlines():
        progress(f"against: {line}")
    return told + len(whole)


def _sweep(work: Path) -> None:
    """Kill what a side killed outright left running from the temporary folder (its PostgreSQL)."""
    if not os.path.isdir("/proc"):
        return
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if entry.isdigit() and str(work).encode() in cmdline.read():
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:
            continue


def run(
    rev: str,
    *,
    rounds: int,
    runs: int,
    ops: int,
    env: dict[str, str],
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    if shutil.which("git") is None:
        raise AgainstError(
            "git is not installed: install git (the other revision is checked out in a worktree)"
        )
    found = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if rev and not rev.startswith("-")  # never an option to git
        else None
    )
    commit = found.stdout.strip() if found is not None and found.returncode == 0 else ""
    if not commit:
        raise AgainstError(f"{rev!r} is not a commit of this repository")
    here = _git("rev-parse", "--short", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        here += " with uncommitted changes"
    work = Path(tempfile.mkdtemp(prefix="keeper-against-"))
    other_tree = work / "tree"
    procs: list[subprocess.Popen[str]] = []
    try:
        _git("worktree", "add", "--detach", "--quiet", str(other_tree), commit)
        sides = {"other": other_tree, "this": ROOT}
        for name, tree in sides.items():
            progress(f"against: migrating a fresh database for {name} ({tree})")
            migrated = subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=tree,
                env=_side_env(work / f"data-{name}", tree, env),
                capture_output=True,
                text=True,
            )
            if migrated.returncode != 0:
                raise AgainstError(f"{name}: migrate failed:\n{migrated.stderr[-2000:]}")
        turn = work / "turn"
        turn.write_text("other")  # the other goes first: each of this tree's rounds has one before it
        code = f"import runpy; runpy.run_path({str(DRIVER)!r}, run_name='__main__')"
        for name, tree in sides.items():
            side_env = {
                "AGAINST_ME": name,
                "AGAINST_OTHER": "this" if name == "other" else "other",
                "AGAINST_TURN": str(turn),
                "AGAINST_ROUNDS": str(rounds),
                "AGAINST_RUNS": str(runs),
                "AGAINST_OPS": str(ops),
            }
            with open(work / f"{name}.out", "w") as out, open(work / f"{name}.err", "w") as err:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "manage.py", "shell", "-c", code],
                        cwd=tree,
                        env=_side_env(work / f"data-{name}", tree, {**env, **side_env}),
                        stdout=out,
                        stderr=err,
                        text=True,
                        start_new_session=True,
                    )
                )
        progress(
            f"against: {rounds} rounds each, taking turns (commit_step {ops} commits, run_e2e {runs} runs)"
        )
        told = 0
        while any(proc.poll() is None for proc in procs):
            told = _relay(work / "turn.progress", told, progress)
            time.sleep(1)
        _relay(work / "turn.progress", told, progress)
        results: dict[str, dict[str, Any]] = {}
        failed = []
        for name, proc in zip(sides, procs, strict=True):
            output = (work / f"{name}.out").read_text(errors="replace").splitlines()
            line = next((x for x in output if x.startswith("AGAINST ")), None)
            if proc.returncode != 0 or line is None:
                tail = (work / f"{name}.err").read_text(errors="replace")[-3000:]
                failed.append(f"{name} side failed (exit {proc.returncode}):\n{tail}")
            else:
                results[name] = json.loads(line.removeprefix("AGAINST "))
        if failed:  # the side that stopped first, then the one that stopped because it did
            raise AgainstError("\n".join(sorted(failed, key=lambda f: "the other side stopped" in f)))
        return {
            "this": here,
            "other": rev,
            "other_commit": commit[:12],
            "this_slice_ms": results["this"]["slice_ms"],
            "other_slice_ms": results["other"]["slice_ms"],
            "env": env,
            "figures": compare(results["this"], results["other"]),
        }
    finally:
        _stop(procs)
        _sweep(work)
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other_tree)], capture_output=True
        )
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def report(result: dict[str, Any]) -> str:
    lines = [
        f"this tree ({result['this']}, slice {result['this_slice_ms']:g} ms) against {result['other']} "
        f"({result['other_commit']}, slice {result['other_slice_ms']:g} ms)"
        + (f", both with {' '.join(f'{k}={v}' for k, v in result['env'].items())}" if result["env"] else ""),
        f"{'':40} {'this':>9} {'other':>9}  this/other (95%)",
    ]
    for key, label, higher_is_better in FIGURES:
        f = result["figures"].get(key)
        if f is None:
            continue
        better = "higher is better" if higher_is_better else "lower is better"
        lines.append(
            f"{label:40} {f['this_median']:>9g} {f['other_median']:>9g}  {f['ratio']:.3f} "
            f"({f['ratio_low']:.3f}-{f['ratio_high']:.3f}), {f['pairs']} pairs, {better}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.against", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "rev", help="the revision to compare with (a commit, tag or branch of this repository)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="rounds each side (default 30)")
    parser.add_argument("--runs", type=int, default=100, help="run_e2e's runs per round (default 100)")
    parser.add_argument(
        "--ops", type=int, default=1000, help="commit_step's commits per round (default 1000)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for both sides (repeatable), e.g. KEEPER_SLICE_MS=1000 to compare with one slice",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--env wants NAME=VALUE, not {item!r}")
        env[name] = value
    if min(args.rounds, args.runs, args.ops) < 1:
        parser.error("--rounds, --runs and --ops must be at least 1")
    try:
        result = run(
            args.rev,
            rounds=args.rounds,
            runs=args.runs,
            ops=args.ops,
            env=env,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except AgainstError as exc:
        print(f"bench.against: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
