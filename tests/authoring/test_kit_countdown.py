"""The test kit (runs.authoring.testing) on demo.countdown: a run driven through the real engine, and
the clock the test moves, which the engine's SQL and Python both read."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from runs.workflows.demo import countdown


def test_a_countdown_runs_every_tick_through_the_engine_and_completes(keeper_env):
    run = keeper_env.start(countdown, {"n": 3})
    run.assert_completed(result={"counted": 3})
    assert run.steps_run == ["start", "tick", "tick", "tick", "finish"]
    assert run.event_types[-1] == "run_completed"
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert run.state["remaining"] == 0


def test_a_countdown_from_zero_goes_straight_to_finish(keeper_env):
    run = keeper_env.start("demo.countdown", {"n": 0})
    run.assert_completed(result={"counted": 0})
    assert run.steps_run == ["start", "finish"]


def test_advancing_the_clock_moves_python_and_postgresql_together(keeper_env):
    before = keeper_env.now()
    keeper_env.advance(hours=5)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp(), now()")
        database_now, transaction_now = cursor.fetchone()
    assert keeper_env.now() - before >= timedelta(hours=5)
    assert abs((database_now - keeper_env.now()).total_seconds()) < 5
    assert abs((transaction_now - keeper_env.now()).total_seconds()) < 5
