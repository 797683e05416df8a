"""gunicorn as `make run` serves it takes request lines up to 8,190 characters: a long search query
gets Keeper's JSON answer, not gunicorn's own HTML 414 page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest

from core.api_auth import api_key_create
from core.processes import stop_groups
from tests.processes import web_serve

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _get(url: str, key: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def test_a_long_query_string_reaches_keeper(tenant, tmp_path: Path):
    key = api_key_create(tenant=tenant, name="long", scope="read").plaintext
    web, base = web_serve(tmp_path / "gunicorn.log")
    try:
        fits = urlencode({"query": "посылка " * 150})  # 1,200 letters, 6,600 characters encoded
        status, kind, body = _get(f"{base}/api/v1/memory/search/?{fits}", key)
        assert (status, json.loads(body)) == (200, {"results": []}) and len(fits) > 4094
        too_long = urlencode({"query": "посылка " * 300})  # past gunicorn's limit too
        status, kind, _ = _get(f"{base}/api/v1/memory/search/?{too_long}", key)
        assert status == 414 and len(too_long) > 8190  # the limit is there: POST takes such a query
    finally:
        stop_groups([web], grace=5)
