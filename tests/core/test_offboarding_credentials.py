"""A tenant export carries no credential: every webhook signing secret was in it in clear, and every
API key's hash (the README says a secret is shown once)."""

from __future__ import annotations

import gzip
import io
import json
import re

import pytest
from django.core.management import call_command
from django.db import connection

from core.api_auth import api_key_create, api_key_revoke
from core.offboarding import NOT_TENANT_DATA, WITHHELD_COLUMNS
from core.tenancy import tenant_bind, tenant_ensure
from runs.webhooks.services import webhook_subscription_create

pytestmark = pytest.mark.django_db(transaction=True)

CREDENTIAL = re.compile(r"secret|password|passwd|credential|private|(^|_)token$|(^|_)hash|sha256$")


def test_an_export_carries_no_secret_or_key_hash_and_says_what_it_keeps(tmp_path):
    acme = tenant_ensure(slug="acme")
    live = api_key_create(tenant=acme, name="ci", scope="write")
    gone = api_key_create(tenant=acme, name="old", scope="read")
    api_key_revoke(prefix=gone.key.prefix)
    with tenant_bind(acme.tenant_id):
        hook = webhook_subscription_create(
            tenant=acme, url="https://hooks.example.com/k", event_types=["run.completed"], actor="t"
        )
    out = tmp_path / "acme.jsonl.gz"
    call_command("tenant_export", "acme", "--out", str(out), stdout=io.StringIO())
    text = gzip.decompress(out.read_bytes()).decode()
    for credential in (
        hook.secret,
        live.plaintext,
        gone.plaintext,
        live.key.secret_sha256,
        gone.key.secret_sha256,
    ):
        assert credential not in text
    lines = [json.loads(line) for line in text.splitlines()]
    header = lines[0]
    assert header["withheld_credentials"]["columns"] == {
        "api_keys": ["secret_sha256"],
        "webhook_subscriptions": ["secret"],
    }
    assert "secret_sha256" in header["omitted_columns"]["api_keys"]
    keys = {r["row"]["prefix"]: r["row"] for r in lines[1:-1] if r.get("table") == "api_keys"}
    assert set(keys) == {live.key.prefix, gone.key.prefix}
    assert keys[live.key.prefix]["revoked_at"] is None and keys[gone.key.prefix]["revoked_at"]
    assert {"key_id", "name", "scope", "created_at"} <= set(keys[live.key.prefix])
    (webhook,) = [r["row"] for r in lines[1:-1] if r.get("table") == "webhook_subscriptions"]
    assert webhook["url"] == "https://hooks.example.com/k" and "secret" not in webhook
    assert webhook["id"] == str(hook.subscription.id) and webhook["created_at"]


def test_every_column_named_like_a_credential_is_withheld_from_exports():
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT table_name, column_name FROM information_schema.columns
                WHERE table_schema = current_schema()
                  AND table_name IN (SELECT table_name FROM information_schema.columns
                                      WHERE table_schema = current_schema() AND column_name = 'tenant_id')"""
        )
        named = {(t, c) for t, c in cursor.fetchall() if CREDENTIAL.search(c) and t not in NOT_TENANT_DATA}
    withheld = {(t, c) for t, columns in WITHHELD_COLUMNS.items() for c in columns}
    assert ("webhook_subscriptions", "secret") in named  # the scan finds them
    assert named <= withheld, sorted(named - withheld)
