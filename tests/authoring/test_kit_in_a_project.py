"""The test kit as a workflow author's project uses it: its own folder, its own workflow module, the
plugin named in its pyproject.toml, no DATABASE_URL or REDIS_URL (the plugin starts its own), and
the clock moved through a signal's timeout and a durable timer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.pytest_plugin import EXPORTED

FLOWS = """
from runs.authoring import Context, State, StepResult, workflow

greet = workflow("shop.greet", version="1", signals=("name_given",))


@greet.step
def ask(ctx: Context, state: State) -> StepResult:
    answer = ctx.wait_signal("name_given", timeout=3600)
    if answer.timed_out:
        return ctx.complete(state, {"greeting": "hello, stranger"})
    return ctx.sleep(say, {**state, "name": answer.payload}, seconds=60)


@greet.step
def say(ctx: Context, state: State) -> StepResult:
    return ctx.complete(state, {"greeting": f"hello, {state['name']}"})


greet.register()
"""

TESTS = """
import shop_flows


def test_a_name_is_greeted_after_the_timer(keeper_env):
    run = keeper_env.start(shop_flows.greet, {})
    run.assert_waiting("signal", at="ask")
    keeper_env.signal(run, "name_given", "Ana")
    keeper_env.advance(seconds=59)
    run.assert_waiting("timer", at="say")
    keeper_env.advance(seconds=1)
    run.assert_completed(result={"greeting": "hello, Ana"})


def test_nobody_answers_within_the_hour(keeper_env):
    run = keeper_env.start(shop_flows.greet, {})
    keeper_env.advance(hours=1)
    run.assert_completed(result={"greeting": "hello, stranger"})
"""


@pytest.mark.slow
def test_a_project_of_its_own_runs_its_workflow_tests_with_the_kit(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "-p config.pytest_plugin --ds=config.settings.test"\n'
    )
    (tmp_path / "shop_flows.py").write_text(FLOWS)
    (tmp_path / "tests" / "test_greet.py").write_text(TESTS)
    # This session's own services are not the project's: it starts its own, as a user's would.
    inherited = set(os.environ.get(EXPORTED, "").split(",")) | {EXPORTED, "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in inherited and not k.startswith("PYTEST_")}
    env |= {"PYTHONPATH": str(tmp_path)}
    env.pop("DATABASE_URL", None), env.pop("REDIS_URL", None), env.pop("KEEPER_WORKFLOW_MODULES", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout
