"""OpenTelemetry: off (a shared no-op) unless OTEL_* asks; when on, spans for API requests, steps,
operations and commits carry ids only, and an outside worker's `traceparent` joins its trace."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core.api_auth import api_key_create
from core.tracing import span, tracing_configured, tracing_on, tracing_use
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from tests.runs.external.conftest import REFUND, key_client

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing_use(provider)
    try:
        yield exporter
    finally:
        tracing_use(None)
        provider.shutdown()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_tracing_is_off_unless_the_otel_variables_ask_for_it():
    assert not tracing_on()  # the test settings configure no exporter
    assert span("keeper.commit", {"keeper.run_id": "x"}) is span("other")  # one shared no-op, no SDK call
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing_configured({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_configured({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"})
    assert not tracing_configured({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})


@pytest.mark.django_db
def test_a_step_and_its_commit_are_spans_with_run_tenant_step_and_revision(tenant, spans):
    run = run_start(
        tenant=tenant,
        workflow_name="demo.countdown",
        input={"n": 2, "email": "ann@example.com"},
        actor="test",
        subject="cust-ann-77",
    ).run
    run_advance(run_id=run.run_id, worker_id="w-trace")
    [step] = _named(spans, "keeper.step")
    [commit] = _named(spans, "keeper.commit")
    assert dict(step.attributes) == {
        "keeper.run_id": str(run.run_id),
        "keeper.tenant_id": str(tenant.tenant_id),
        "keeper.step": "start",
        "keeper.revision": 1,
        "keeper.workflow": "demo.countdown",
        "keeper.workflow_version": run.workflow_version,
    }
    assert commit.parent.span_id == step.context.span_id and commit.context.trace_id == step.context.trace_id
    assert commit.attributes["keeper.run_id"] == str(run.run_id) and commit.attributes["keeper.revision"] == 2
    assert commit.attributes["keeper.step"] == "start"
    every = json.dumps([dict(s.attributes) for s in spans.get_finished_spans()])
    assert "ann@example.com" not in every and "cust-ann-77" not in every  # no personal data


def test_only_allowed_attributes_reach_a_span(spans):
    with span(
        "keeper.step", {"keeper.run_id": "r-1", "customer.email": "ann@example.com", "state": {"a": 1}}
    ):
        pass
    [made] = spans.get_finished_spans()
    assert dict(made.attributes) == {"keeper.run_id": "r-1"}


@pytest.mark.django_db
def test_an_outside_workers_traceparent_joins_its_trace_through_claim_commit_and_operations(tenant, spans):
    api = key_client(api_key_create(tenant=tenant, name="w", scope="write").plaintext)
    assert api.post("/api/v1/workflows/external/", REFUND, format="json").status_code == 201
    started = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-1"}}, format="json"
    )
    run_id = started.json()["run_id"]
    spans.clear()
    claim = api.post(
        "/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json", HTTP_TRACEPARENT=TRACEPARENT
    ).json()
    w = f"/api/v1/workers/runs/{run_id}/"
    committed = api.post(
        w + "commit",
        {
            "lease_token": claim["lease_token"],
            "expected_revision": claim["revision"],
            "state": claim["state"],
            "next_step": "refund",
        },
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert committed.status_code == 200, committed.content
    claim = api.post(
        "/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json", HTTP_TRACEPARENT=TRACEPARENT
    ).json()
    prep = {
        "lease_token": claim["lease_token"],
        "operation_id": "refund:o-1",
        "tool_name": "payments.refund",
        "tool_contract_version": "payments.v1",
        "request": {"order_id": "o-1", "amount_minor": 10},
    }
    assert (
        api.post(w + "operations/prepare", prep, format="json", HTTP_TRACEPARENT=TRACEPARENT).status_code
        == 200
    )
    moved = api.post(
        w + "operations/refund:o-1/started",
        {"lease_token": claim["lease_token"]},
        format="json",
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert moved.status_code == 200, moved.content

    finished = spans.get_finished_spans()
    requests = [s for s in finished if s.name.startswith("POST api/v1/workers/")]
    assert len(requests) == 5
    for request in requests:
        assert format(request.context.trace_id, "032x") == TRACE_ID
        assert format(request.parent.span_id, "016x") == PARENT_ID  # a child of the agent's span
        assert request.attributes["keeper.tenant_id"] == str(tenant.tenant_id)
        assert request.attributes["http.response.status_code"] == 200
    assert {s.attributes["http.route"] for s in requests} >= {
        "api/v1/workers/claim",
        "api/v1/workers/runs/<uuid:run_id>/commit",
    }
    [commit] = _named(spans, "keeper.commit")
    [operation] = _named(spans, "keeper.operation")
    by_id = {s.context.span_id: s for s in requests}
    assert commit.parent.span_id in by_id and operation.parent.span_id in by_id
    assert format(commit.context.trace_id, "032x") == TRACE_ID == format(operation.context.trace_id, "032x")
    assert (
        commit.attributes["keeper.run_id"] == run_id and operation.attributes["keeper.outcome"] == "started"
    )
    assert "o-1" not in json.dumps([dict(s.attributes) for s in finished])


def test_the_python_client_sends_the_traceparent_it_is_given():
    from keeper_client import KeeperClient

    from tests.runs.external import conftest  # noqa: F401 - puts clients/python on sys.path

    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(self.headers.get("traceparent"))
            body = b'{"registered": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with KeeperClient(base, "kp_x", traceparent=TRACEPARENT) as client:
            client._post("workers/claim", {})
        current = {"value": None}
        with KeeperClient(base, "kp_x", traceparent=lambda: current["value"]) as client:
            client._post("workers/claim", {})
            current["value"] = TRACEPARENT.replace("-01", "-00")
            client._post("workers/claim", {})
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [TRACEPARENT, None, TRACEPARENT.replace("-01", "-00")]
