"""A running local receiver, a tenant API client, and HTTP endpoints allowed (tests are not DEBUG)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from tests.runs.webhooks.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver(fail_first=0).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def allow_http(settings) -> None:
    """Plain http to the local receiver: http and the deployment's own network allowed."""
    settings.KEEPER_WEBHOOKS_ALLOW_HTTP = True
    settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = True


@pytest.fixture
def api(tenant) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION="Bearer " + api_key_create(tenant=tenant, name="hooks", scope="write").plaintext
    )
    return client
