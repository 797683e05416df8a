"""An external refund-like workflow registered for the test tenant, and API clients with write keys."""

from __future__ import annotations

import sys

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.processes import ROOT

# The client is its own package (clients/python); importable here without installing it.
if str(ROOT / "clients" / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "clients" / "python"))

REFUND = {
    "name": "ext.refund",
    "version": "1",
    "steps": ["lookup", "refund", "verify"],
    "tools": [{"name": "payments.refund", "version": "payments.v1"}],
    "input_schema": {
        "type": "object",
        "required": ["order_id"],
        "properties": {"order_id": {"type": "string", "minLength": 1}},
    },
}


def key_client(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def write_key(tenant) -> str:
    return api_key_create(tenant=tenant, name="worker", scope="write").plaintext


@pytest.fixture
def api(write_key) -> APIClient:
    return key_client(write_key)


@pytest.fixture
def workflow(api):
    response = api.post("/api/v1/workflows/external/", REFUND, format="json")
    assert response.status_code == 201, response.content
    return response.json()
