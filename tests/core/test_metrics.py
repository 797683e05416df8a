"""`/metrics`: figures read from the durable tables and the queue at scrape time, the step latency
the engine observes, and the bearer token that protects them."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
import redis
from django.conf import settings as django_settings
from prometheus_client import REGISTRY

from core.metrics import worker_metrics_serve
from runs.engine.operations import operation_prepare_once
from runs.engine.runs import run_cancel, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentRun
from tests.processes import flush_redis, wait_until

TOKEN = "metrics-token-for-tests"


def _value(text: str, name: str, **labels: str) -> float:
    """The sample `name` with exactly these labels (in any order) from the exposition text."""
    for line in text.splitlines():
        match = re.fullmatch(re.escape(name) + r"(?:\{(.*)\})? ([0-9.e+-]+|NaN)", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or "")) == labels:
            return float(match.group(2))
    raise AssertionError(f"{name} {labels} not in:\n{text}")


def _scrape(client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


@pytest.fixture
def token(settings):
    settings.KEEPER_METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.mark.django_db
def test_metrics_count_runs_operations_takeovers_and_the_queue(client, tenant, token):
    def start(n: int):
        return run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test").run

    running, suspended, cancelled, taken_over = start(3), start(4), start(5), start(6)
    run_suspend(run_id=suspended.run_id, actor="test", reason="manual")
    run_cancel(run_id=cancelled.run_id, actor="test")
    for key in ("refund:o-1", "refund:o-2"):
        operation_prepare_once(
            tenant_id=tenant.pk,
            run_id=running.run_id,
            step_id="refund",
            operation_id=key,
            tool_name="payments.refund",
            tool_contract_version="payments.v1",
            request={"key": key},
            actor="test",
        )
    # A worker takes the lease and dies; the next one takes the run over after the lease expires.
    assert (
        apply(
            m.LeaseTaken(
                run_id=taken_over.run_id,
                tenant_id=taken_over.tenant_id,
                owner="dead-worker",
                ttl=0.05,
            )
        )
        is not None
    )
    time.sleep(0.2)
    assert run_advance(run_id=taken_over.run_id, worker_id="live-worker").outcome == "committed"
    flush_redis()
    redis.Redis.from_url(django_settings.REDIS_URL).rpush("celery", "a", "b", "c")
    try:
        text = _scrape(client)
    finally:
        flush_redis()

    assert _value(text, "keeper_runs", status="running") == 2
    assert _value(text, "keeper_runs", status="suspended") == 1
    assert _value(text, "keeper_runs", status="cancelled") == 1
    assert _value(text, "keeper_runs", status="completed") == 0
    assert _value(text, "keeper_operations", status="prepared") == 2
    assert _value(text, "keeper_operations", status="unknown") == 0
    assert _value(text, "keeper_lease_takeovers_total") == 1
    assert _value(text, "keeper_celery_queue_length", queue="celery") == 3
    assert _value(text, "keeper_metrics_source_up", source="database") == 1
    assert _value(text, "keeper_metrics_source_up", source="redis") == 1
    assert "# TYPE keeper_step_duration_seconds histogram" in text


@pytest.mark.django_db
def test_step_latency_is_observed_per_workflow_and_step(client, tenant, token):
    labels = {"workflow": "demo.countdown", "step": "start"}
    before = REGISTRY.get_sample_value("keeper_step_duration_seconds_count", labels) or 0
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
    assert run_advance(run_id=run.run_id).outcome == "committed"
    text = _scrape(client)
    assert _value(text, "keeper_step_duration_seconds_count", **labels) == before + 1
    assert _value(text, "keeper_step_duration_seconds_bucket", **labels, le="+Inf") == before + 1


@pytest.mark.django_db
def test_a_broken_redis_is_reported_not_raised(client, token, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    text = _scrape(client)
    assert _value(text, "keeper_metrics_source_up", source="redis") == 0
    assert "keeper_celery_queue_length{" not in text and "keeper_runs{" in text


def test_metrics_need_the_bearer_token(client, settings):
    settings.DEBUG = False
    settings.KEEPER_METRICS_TOKEN = ""
    response = client.get("/metrics")
    assert response.status_code == 403 and b"KEEPER_METRICS_TOKEN is not set" in response.content
    settings.KEEPER_METRICS_TOKEN = TOKEN
    response = client.get("/metrics")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401


@pytest.mark.django_db
def test_metrics_are_open_in_debug_without_a_token(client, settings):
    settings.DEBUG = True
    settings.KEEPER_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200


def test_the_worker_serves_its_step_latency_on_its_own_port(monkeypatch, settings):
    settings.KEEPER_WORKER_METRICS_PORT = ""
    assert worker_metrics_serve() is None
    settings.KEEPER_WORKER_METRICS_PORT = "0"
    settings.KEEPER_WORKER_METRICS_ADDR = "127.0.0.1"
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    port = worker_metrics_serve()
    assert port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert b"keeper_step_duration_seconds" in response.read()


def _worker_sample(port: int, name: str, labels: dict[str, str]) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    try:
        return _value(text, name, **labels)
    except AssertionError:
        return None


@pytest.mark.slow
def test_a_prefork_worker_serves_the_step_latency_of_its_pool(tenant, processes, tmp_path):
    """As docker-compose runs it: prefork children write to PROMETHEUS_MULTIPROC_DIR and the worker
    sums them on KEEPER_WORKER_METRICS_PORT."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    processes.worker(
        concurrency=2,
        env={
            "KEEPER_WORKER_METRICS_PORT": str(port),
            "KEEPER_WORKER_METRICS_ADDR": "127.0.0.1",
            "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        },
    )
    runs = [
        run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
        for _ in "ab"
    ]
    wait_until(
        lambda: all(AgentRun.objects.get(run_id=r.run_id).status == "completed" for r in runs),
        timeout=60,
        message="both runs to complete",
    )
    labels = {"workflow": "demo.countdown", "step": "start"}
    wait_until(
        lambda: _worker_sample(port, "keeper_step_duration_seconds_count", labels) == 2,
        timeout=10,
        message="the worker's metrics to count both first steps",
    )
