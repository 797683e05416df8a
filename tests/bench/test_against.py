"""`python -m bench.against REV` (make bench-against): this tree against another revision, from one run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench import against


def _needs_git() -> None:
    if shutil.which("git") is None:
        pytest.skip("install git: bench.against checks the other revision out in a git worktree")


def _command_lines() -> str:
    """Every running process's command line (from /proc, as bench.against reads them)."""
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    lines.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(lines)


def test_each_round_is_compared_with_the_other_sides_rounds_before_and_after_it():
    # The other side went first: this tree's round i sits between the other's rounds i and i + 1.
    assert against.paired_ratios([110.0, 90.0], [100.0, 120.0, 80.0]) == pytest.approx([110 / 110, 90 / 100])
    # The last round has only the other's round before it; a round without a figure is left out.
    assert against.paired_ratios([50.0, None, 60.0], [100.0, 100.0, 120.0]) == pytest.approx([0.5, 0.5])
    assert against.paired_ratios([None], [100.0]) == []


def test_the_geometric_mean_comes_with_an_interval_that_holds_it_and_is_the_same_every_time():
    assert against.geometric_interval([1.1, 1.1, 1.1]) == pytest.approx((1.1, 1.1, 1.1))
    ratios = [0.9, 1.0, 1.1, 1.05, 0.95, 1.2, 0.85]
    mean, low, high = against.geometric_interval(ratios)
    assert low < mean < high
    assert mean == pytest.approx((0.9 * 1.0 * 1.1 * 1.05 * 0.95 * 1.2 * 0.85) ** (1 / 7))
    assert against.geometric_interval(ratios) == (mean, low, high)
    with pytest.raises(ValueError):
        against.geometric_interval([])


def test_the_comparison_names_medians_and_ratios_for_the_figures_both_sides_have():
    this = {"rounds": [{"run_e2e_steps_per_s": 2000.0, "worker_cpu_ms_per_step": None}] * 3}
    other = {"rounds": [{"run_e2e_steps_per_s": 1000.0, "worker_cpu_ms_per_step": None}] * 3}
    figures = against.compare(this, other)
    assert set(figures) == {"run_e2e_steps_per_s"}  # no CPU figures without /proc: none compared
    assert figures["run_e2e_steps_per_s"] == {
        "this_median": 2000.0,
        "other_median": 1000.0,
        "ratio": 2.0,
        "ratio_low": 2.0,
        "ratio_high": 2.0,
        "pairs": 3,
    }


def test_a_revision_that_is_not_a_commit_is_refused_with_a_reason(capsys):
    _needs_git()
    assert against.main(["no-such-revision-anywhere"]) == 2
    assert "'no-such-revision-anywhere' is not a commit of this repository" in capsys.readouterr().err


def test_a_setting_for_both_sides_must_name_a_value(capsys):
    with pytest.raises(SystemExit) as stop:
        against.main(["HEAD", "--env", "KEEPER_SLICE_MS"])
    assert stop.value.code == 2
    assert "--env wants NAME=VALUE, not 'KEEPER_SLICE_MS'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the processes left behind from /proc (Linux)")
def test_this_tree_against_its_own_head_takes_turns_and_leaves_nothing_behind(tmp_path):
    """Both sides start their own database, Redis and Celery worker, take two turns each, report
    every figure, and leave no worktree and no process behind."""
    _needs_git()
    checkout = subprocess.run(["git", "-C", str(against.ROOT), "rev-parse", "--git-dir"], capture_output=True)
    if checkout.returncode != 0:
        pytest.skip("not a git checkout: bench.against needs this tree's history (a worktree of HEAD)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGAINST_")}
    env["TMPDIR"] = str(tmp_path)  # the worktree and both data folders go under here
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.against",
            "HEAD",
            "--rounds",
            "2",
            "--runs",
            "3",
            "--ops",
            "20",
            "--json",
        ],
        cwd=against.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for side in ("this", "other"):  # the rounds show as they end
        assert f"against: {side}: commit_step round 2/2: engine " in done.stderr
        assert f"against: {side}: run_e2e round 2/2: " in done.stderr
    assert result["other"] == "HEAD"
    for key in ("commit_step_engine_ops_s", "commit_step_raw_ops_s", "run_e2e_steps_per_s"):
        figure = result["figures"][key]
        assert figure["pairs"] == 2
        assert figure["this_median"] > 0 and figure["other_median"] > 0
        assert figure["ratio_low"] <= figure["ratio"] <= figure["ratio_high"]
    # The worktree and both data folders are gone (the embedded Redis leaves an empty socket folder).
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("keeper-against-")] == []
    worktrees = subprocess.run(
        ["git", "-C", str(against.ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert str(tmp_path) not in worktrees
    assert str(tmp_path) not in _command_lines()
