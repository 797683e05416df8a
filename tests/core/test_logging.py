"""Structured logs: one JSON object per line, carrying the run and tenant a step belongs to."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from core.logging import JSONFormatter, LogContextMiddleware, RunContextFilter, log_context
from runs.engine.registry import Complete, State, Step, StepContext, StepResult, Workflow, registry
from runs.engine.runs import run_start
from runs.engine.steps import run_advance

step_logger = logging.getLogger("tests.core.logging_step")


def _logging_step(ctx: StepContext, state: State) -> StepResult:
    step_logger.info("refund %s checked", state["order"])
    return Complete(state, {"ok": True})


registry.register(Workflow(name="test.logs_in_step", version="1", steps=(Step("check", _logging_step),)))


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    # As a request's start does: an earlier test's request in this thread left its tenant in the
    # log context (kept after a response on purpose, see LogContextMiddleware).
    LogContextMiddleware(lambda request: None)(None)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    handler.addFilter(RunContextFilter())
    step_logger.addHandler(handler)
    previous = step_logger.level
    step_logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        step_logger.removeHandler(handler)
        step_logger.setLevel(previous)


def _records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.django_db
def test_a_record_logged_inside_a_step_carries_its_run_and_tenant(tenant, json_lines):
    run = run_start(
        tenant=tenant, workflow_name="test.logs_in_step", input={"order": "o-7"}, actor="test"
    ).run
    assert run_advance(run_id=run.run_id).status == "completed"
    [record] = _records(json_lines)
    assert record["message"] == "refund o-7 checked"
    assert record["run_id"] == str(run.run_id) and record["tenant_id"] == str(tenant.pk)
    assert record["level"] == "INFO" and record["logger"] == "tests.core.logging_step"
    assert set(record) == {"time", "level", "logger", "message", "run_id", "tenant_id"}

    step_logger.info("after the step")  # the context ends with the step
    assert "run_id" not in _records(json_lines)[-1] and "tenant_id" not in _records(json_lines)[-1]


def test_contexts_nest_and_exceptions_stay_on_one_line(json_lines):
    with log_context(tenant_id="t-1"), log_context(run_id="r-1"):
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            step_logger.exception("step failed")
    assert len(json_lines.getvalue().splitlines()) == 1
    [record] = _records(json_lines)
    assert (record["run_id"], record["tenant_id"]) == ("r-1", "t-1")
    assert record["exc_info"].startswith("Traceback") and "ValueError: bad" in record["exc_info"]


def test_the_configured_console_handler_adds_the_run_context(settings):
    handler = settings.LOGGING["handlers"]["console"]
    assert handler["filters"] == ["run_context", "access_lines"]
    assert settings.LOGGING["filters"]["run_context"]["()"] == "core.logging.RunContextFilter"
    assert settings.LOGGING["filters"]["access_lines"]["()"] == "core.logging.AccessLineFilter"
    assert settings.LOGGING["formatters"]["json"]["()"] == "core.logging.JSONFormatter"
    assert handler["formatter"] == settings.KEEPER_LOG_FORMAT  # plain unless KEEPER_LOG_FORMAT=json


@pytest.mark.django_db
def test_an_api_request_logs_with_the_keys_tenant_and_the_next_request_does_not(tenant):
    from rest_framework.test import APIClient

    from core.api_auth import api_key_create

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(level=logging.WARNING)
            self.addFilter(RunContextFilter())  # as the configured handler does
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    key = api_key_create(tenant=tenant, name="ci", scope="read").plaintext
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    collect, logger = Collect(), logging.getLogger("django.request")
    logger.addHandler(collect)
    try:
        assert client.get("/api/v1/runs/00000000-0000-0000-0000-000000000000/").status_code == 404
        APIClient().get("/api/v1/runs/00000000-0000-0000-0000-000000000000/")  # no key: 401
    finally:
        logger.removeHandler(collect)
    stamped = [record.tenant_id for record in collect.records]
    assert stamped[0] == str(tenant.tenant_id) and stamped[-1] is None, stamped


def test_a_django_request_line_comes_out_once_and_without_the_subject_in_its_path():
    """manage.py with DEBUG on, as `make run` is: Django's own console handler for "django" printed
    each django.request line a second time, bare; and a 404's path named the subject."""
    import os
    import subprocess
    import sys

    from core.processes import ROOT

    code = (
        "import logging; logging.getLogger('django.request').warning("
        "'%s: %s', 'Not Found', '/api/v1/memory/subjects/cust-4471-odile/memory.md')"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local", "DEBUG": "true"}
    env.pop("KEEPER_LOG_FORMAT", None)
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "Not Found" in line]
    assert len(lines) == 1, done.stderr
    assert "/api/v1/memory/subjects/*/memory.md" in lines[0] and "odile" not in done.stderr


def test_a_document_id_in_a_path_is_left_out_of_the_logs():
    """A document's id may name a person ("transcript-王芳", sent percent-encoded) and hold "/": the
    routes' paths keep their shape, never the id; the list's own path is left as it is."""
    from core.logging import path_redact, request_line_redact

    assert path_redact("/api/v1/retrieval/documents/transcript-%E7%8E%8B%E8%8A%B3/") == (
        "/api/v1/retrieval/documents/*/"
    )
    assert (
        path_redact("/api/v1/retrieval/documents/kb/2026/ada.txt/acl") == "/api/v1/retrieval/documents/*/acl"
    )
    assert path_redact("/api/v1/retrieval/documents/transcript-王芳/") == "/api/v1/retrieval/documents/*/"
    assert path_redact("/api/v1/retrieval/documents/") == "/api/v1/retrieval/documents/"
    assert request_line_redact("DELETE /api/v1/retrieval/documents/ada/?tenant=acme HTTP/1.1") == (
        "DELETE /api/v1/retrieval/documents/*/?tenant=* HTTP/1.1"
    )


def test_a_principal_in_a_path_is_left_out_of_the_logs():
    """A retrieval principal names a person: a 404 on DELETE of a principal must not write its e-mail
    address to the log at WARNING, nor to gunicorn's access line at INFO."""
    from core.logging import path_redact, request_line_redact

    assert path_redact("/api/v1/retrieval/principals/user:jane.doe@example.com/") == (
        "/api/v1/retrieval/principals/*/"
    )
    assert path_redact("/api/v1/retrieval/principals/") == "/api/v1/retrieval/principals/"
    assert request_line_redact("DELETE /api/v1/retrieval/principals/user:ada%40x.org/ HTTP/1.1") == (
        "DELETE /api/v1/retrieval/principals/*/ HTTP/1.1"
    )


def test_every_segment_a_caller_chose_is_left_out_of_the_logs():
    """An operation keyed note:cust-7781 (gunicorn's access lines) and a query or signal named after
    a customer (Django's 404 and 422 warnings) are not logged in full. The route's own
    words, UUIDs and numbers stay, so a line still says which route was called."""
    from core.logging import path_redact, request_line_redact

    run = "0b0c3f9e-1111-2222-3333-444455556666"
    assert path_redact(f"/api/v1/workers/runs/{run}/operations/note:cust-7781/started") == (
        f"/api/v1/workers/runs/{run}/operations/*/started"
    )
    assert path_redact(f"/api/v1/runs/{run}/queries/cust-7781") == f"/api/v1/runs/{run}/queries/*"
    assert request_line_redact(f"POST /api/v1/runs/{run}/signals/zed.quixote@example.org HTTP/1.1") == (
        f"POST /api/v1/runs/{run}/signals/* HTTP/1.1"
    )
    assert path_redact("/api/v1/no-such-route/cust-7781/") == "/api/v1/*/*/"
    for kept in ("/webhooks/12/delete/", "/audit/export.csv", "/runs/", "/", "/static/console.css"):
        assert path_redact(kept) == kept


@pytest.mark.django_db
def test_a_csrf_refusal_line_leaves_the_callers_segments_out(caplog):
    """`Forbidden (CSRF cookie not set.): /compliance/<anything>/erasures/` is logged with `*`, as the
    access line is, not with the raw path."""
    from django.test import Client

    with caplog.at_level(logging.WARNING, logger="django.security.csrf"):
        response = Client(enforce_csrf_checks=True).post("/compliance/zed.quixote@example.org/erasures/")
    assert response.status_code == 403
    lines = [r.getMessage() for r in caplog.records if r.name == "django.security.csrf"]
    assert lines and all("zed.quixote" not in line for line in lines), lines
    assert "/compliance/*/erasures/" in lines[0]
