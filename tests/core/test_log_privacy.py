"""Logs never carry a subject's id or text: an erasure scenario through the API of a real web server
(gunicorn as `make run` starts it, and runserver), with the erasure itself run in this process;
neither the access lines nor the INFO records hold the subject id, the message, the note or the query."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import pytest

from core.api_auth import api_key_create
from core.processes import stop_groups, web_args
from erasure.services import erasure_execute
from tests.processes import web_serve

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBJECT = "cust-7781-hedwig"
MESSAGE = "my parcel went to Gartenstrasse 12"
NOTE = "hedwig called about the Gartenstrasse parcel"
QUERY = "Gartenstrasse parcel"
MEMORY = "prefers Gartenstrasse deliveries"
SECRETS = (SUBJECT, "Gartenstrasse", "hedwig", "Gartenstrasse+parcel", "Gartenstrasse%20parcel")


def _call(base: str, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _subject_files(base: str, key: str) -> None:
    """The subject's id as a path segment: its memory file, and a subject with none (a 404)."""
    for subject in (SUBJECT, f"{SUBJECT}-unknown"):
        url = f"{base}/api/v1/memory/subjects/{subject}/memory.md"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as error:
            error.read()


def _scenario(base: str, key: str) -> UUID:
    """The subject's data through every kind of API call; the erasure request's id."""
    started = _call(
        base, key, "POST", "/api/v1/runs/", {"workflow": "conversation", "input": {}, "subject": SUBJECT}
    )
    assert started[0] == 201, started
    run_id = started[1]["run_id"]
    sent = _call(
        base,
        key,
        "POST",
        f"/api/v1/runs/{run_id}/messages/",
        {"type": "user_message", "client_message_id": f"{SUBJECT}-1", "content": MESSAGE},
    )
    assert sent[0] == 201, sent
    assert _call(base, key, "POST", f"/api/v1/runs/{run_id}/cancel", {"note": NOTE})[0] == 200
    item = {
        "subject_id": SUBJECT,
        "namespace": "preferences",
        "key": "delivery",
        "value": MEMORY,
        "provenance": {
            "source_type": "user_statement",
            "source_id": f"run:{run_id}",
            "source_version": None,
            "run_id": run_id,
            "event_seq": 1,
            "validation_method": "user_statement",
        },
    }
    assert _call(base, key, "POST", "/api/v1/memory/items/", item)[0] == 201
    for path in (
        f"/api/v1/memory/items/?{urlencode({'subject_id': SUBJECT})}",
        f"/api/v1/memory/search/?{urlencode({'subject_id': SUBJECT, 'query': QUERY})}",
        f"/api/v1/runs/?{urlencode({'subject': SUBJECT})}",
    ):
        assert _call(base, key, "GET", path)[0] == 200, path
    _subject_files(base, key)
    erasure = _call(base, key, "POST", "/api/v1/erasure-requests/", {"subject_id": SUBJECT})
    assert erasure[0] == 202 or erasure[0] == 201, erasure
    return UUID(erasure[1]["request_id"])


def _assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret.lower() not in text.lower(), (
            secret,
            [line for line in text.splitlines() if secret in line],
        )


def test_an_erasure_scenario_leaves_no_subject_data_in_the_logs(tenant, tmp_path: Path, caplog):
    caplog.set_level(logging.INFO)
    key = api_key_create(tenant=tenant, name="privacy", scope="write").plaintext
    servers = {
        "gunicorn": web_args("127.0.0.1", "PORT"),
        "runserver": ["manage.py", "runserver", "--noreload", "--skip-checks", "127.0.0.1:PORT"],
    }
    for name, args in servers.items():
        log_path = tmp_path / f"{name}.log"
        web, base = web_serve(log_path, args)
        try:
            if name == "gunicorn":
                request_id = _scenario(base, key)
            else:  # the query strings alone, through the other server's access log
                for query in ({"subject_id": SUBJECT}, {"subject_id": SUBJECT, "query": QUERY}):
                    _call(base, key, "GET", f"/api/v1/memory/search/?{urlencode(query)}")
                _subject_files(base, key)
        finally:
            stop_groups([web], grace=5)
        access = log_path.read_text(errors="replace")
        _assert_clean(access)
        assert "/api/v1/memory/search/?subject_id=*" in access, access[-2000:]  # the lines are there
        assert "/api/v1/memory/subjects/*/memory.md" in access, access[-2000:]
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request_id)
    _assert_clean("\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records))
