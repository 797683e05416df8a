"""Run ids are version-7 UUIDs: the time first, so that a new run's index entries go next to the last
run's instead of onto a random page (core/ids.py)."""

from __future__ import annotations

import time
from uuid import UUID

import pytest

from core.ids import uuid7
from runs.engine.forks import run_fork
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from runs.langgraph.saver import KeeperSaver
from tests.runs.langgraph.graphs import support_graph


def _ms(value: UUID) -> int:
    return value.int >> 80


def test_a_version_7_id_holds_the_time_the_version_and_the_variant() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid7()
    after = time.time_ns() // 1_000_000
    assert (made.version, made.variant) == (7, "specified in RFC 4122")
    assert before <= _ms(made) <= after
    assert _ms(uuid7(at_ms=1_700_000_000_123)) == 1_700_000_000_123


def test_ids_of_later_milliseconds_sort_later_and_the_rest_is_random() -> None:
    ids = [uuid7(at_ms=1_700_000_000_000 + n) for n in range(200)]
    assert ids == sorted(ids)
    same = {uuid7(at_ms=1_700_000_000_000) for _ in range(200)}
    assert len(same) == 200  # 74 random bits: no two alike
    assert {u.int & ((1 << 62) - 1) for u in same} != {0}


@pytest.mark.parametrize("ms", [-1, 1 << 48])
def test_a_time_outside_48_bits_is_refused(ms: int) -> None:
    with pytest.raises(ValueError, match="48 bits"):
        uuid7(at_ms=ms)


@pytest.mark.django_db(transaction=True)
def test_runs_forks_and_threads_get_time_ordered_ids_in_the_order_they_were_made(tenant) -> None:
    started = []
    for _ in range(3):
        started.append(
            run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t").run
        )
        time.sleep(0.002)
    fork = run_fork(run_id=started[0].run_id, at_seq=1, actor="user:t", start=False)
    time.sleep(0.002)
    saver = KeeperSaver(tenant_id=tenant.tenant_id)
    try:
        config = {"configurable": {"thread_id": "ordered", "subject_id": "cust-1"}}
        support_graph(saver).invoke({"note": "a note", "log": []}, config)
    finally:
        saver.close()
    thread = AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:ordered")
    made = [run.run_id for run in [*started, fork, thread]]
    assert {run_id.version for run_id in made} == {7}
    assert made == sorted(made)
    # and the database sorts them as Python does (uuid compares bytes, as PostgreSQL's btree does)
    in_index_order = list(
        AgentRun.objects.filter(run_id__in=made).order_by("run_id").values_list("run_id", flat=True)
    )
    assert in_index_order == made
    assert AgentEvent.objects.filter(run_id=fork.run_id).exists()
