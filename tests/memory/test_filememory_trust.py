"""MEMORY.md written back: a line keeps only the consent basis someone stated (a sensitive line
without one waits for the subject), the file has a size cap with a clear 413, and an edit takes the
same number of queries however many lines it has."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from memory.filememory import MEMORY_MD_MAX_BYTES, MEMORY_MD_MAX_CLAIMS
from memory.models import MemoryItem
from memory.poisoning.models import HeldClaim
from memory.selectors import memory_recall
from tests.console.conftest import as_role, role_users  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db

MD = "/api/v1/memory/subjects/c-1/memory.md"
PAGE = "/compliance/acme/memory-md/"


@pytest.fixture
def key(tenant):
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='md', scope='write').plaintext}"
    )
    return client


def test_a_memory_md_line_without_a_basis_is_never_kept_as_explicit(key, tenant):
    put = key.put(
        MD,
        {
            "content": '- health/condition: "diabetes"\n'
            '- preference/language: "de"\n'
            '- Health/allergy: "peanuts"  <!-- consent=explicit -->\n'
        },
        format="json",
    )
    assert put.status_code == 200, put.json()
    edit = put.json()
    assert edit["added"] == 2
    [waiting] = edit["held"]
    assert waiting["line"] == 1 and waiting["code"] == "claim_pending_confirmation"
    items = {m.key: m for m in memory_recall(tenant=tenant, subject_id="c-1")}
    assert set(items) == {"language", "allergy"}
    assert items["language"].consent_basis is None and items["allergy"].consent_basis == "explicit"
    assert not MemoryItem.objects.filter(consent_basis="explicit", key="condition").exists()
    text = key.get(MD).content.decode()
    assert 'preference/language: "de"' in text and "consent=unknown" in text
    # Written back as rendered: nothing changes, "unknown" stays no basis.
    assert key.put(MD, {"content": text}, format="json").json()["unchanged"] == 2
    confirmed = key.post(f"/api/v1/memory/pending/{waiting['pending_id']}/confirm", {}, format="json")
    assert confirmed.status_code == 201 and confirmed.json()["consent_basis"] == "explicit"


def test_a_memory_md_basis_the_policy_refuses_or_a_mood_line_names_its_line(key, tenant):
    refused = key.put(
        MD,
        {
            "content": '- preference/language: "de"\n- medical/history: "asthma"\n- mood/state: "angry"\n',
            "consent_basis": "contract",
        },
        format="json",
    )
    assert refused.status_code == 422, refused.json()
    lines = {e["line"]: e for e in refused.json()["error"]["details"]["lines"]}
    assert lines[2]["code"] == "consent_required" and lines[3]["code"] == "state_of_mind_not_kept"
    assert set(lines) == {2, 3}
    unknown = key.put(MD, {"content": '- profile/city: "Porto"  <!-- consent=maybe -->\n'}, format="json")
    assert (
        unknown.status_code == 422 and "consent=" in unknown.json()["error"]["details"]["lines"][0]["error"]
    )
    assert not MemoryItem.objects.exists() and not HeldClaim.objects.exists()


def test_the_console_keeps_no_basis_the_officer_did_not_choose(as_role, tenant):  # noqa: F811
    client = as_role("compliance")
    saved = client.post(
        PAGE,
        {"subject": "c-1", "content": '- health/condition: "diabetes"\n', "note": "ticket 7"},
    )
    assert saved.status_code == 302
    assert memory_recall(tenant=tenant, subject_id="c-1") == []
    page = client.get(PAGE + "?subject=c-1").content.decode()
    assert "health/condition" in page  # waiting for the subject's confirmation, on the same page
    client.post(
        PAGE,
        {
            "subject": "c-1",
            "content": '- health/condition: "diabetes"\n',
            "consent_basis": "explicit",
            "note": "the customer asked us to, ticket 8",
        },
    )
    [item] = memory_recall(tenant=tenant, subject_id="c-1")
    assert item.consent_basis == "explicit" and item.provenance["source_type"] == "operator"


def test_a_memory_md_over_its_limits_is_refused_whole_with_413(key, tenant):
    big = "# " + "x" * MEMORY_MD_MAX_BYTES + '\n- preference/language: "de"\n'
    too_big = key.put(MD, {"content": big}, format="json")
    assert too_big.status_code == 413, too_big.json()
    error = too_big.json()["error"]
    assert error["code"] == "memory_md_too_large" and error["details"]["max_bytes"] == MEMORY_MD_MAX_BYTES
    many = "".join(f"- p/k{i}: {i}\n" for i in range(MEMORY_MD_MAX_CLAIMS + 1))
    too_many = key.put(MD, {"content": many}, format="json")
    assert too_many.status_code == 413, too_many.json()
    assert too_many.json()["error"]["details"]["claims"] == MEMORY_MD_MAX_CLAIMS + 1
    assert not MemoryItem.objects.exists()


def _queries(client, text):
    with CaptureQueriesContext(connection) as captured:
        answer = client.put(MD, {"content": text}, format="json")
    assert answer.status_code == 200, answer.json()
    return len(captured.captured_queries), answer.json()


def test_a_memory_md_edit_takes_the_same_queries_for_ten_lines_or_a_thousand(key, tenant):
    few, _ = _queries(key, "".join(f'- pref/k{i}: "v{i}"\n' for i in range(10)))
    MemoryItem.objects.all().delete()
    lines = "".join(f'- pref/k{i}: "v{i}"\n' for i in range(MEMORY_MD_MAX_CLAIMS))
    many, edit = _queries(key, lines)
    assert edit["added"] == MEMORY_MD_MAX_CLAIMS and many == few
    # Changing every value, dropping a line and adding one: still the same few queries.
    rendered = key.get(MD).content.decode().replace('"v', '"w').splitlines()
    text = "\n".join('- pref/new: "w0"' if line.startswith("- pref/k0:") else line for line in rendered)
    changed, edit = _queries(key, text)
    assert edit["superseded"] == MEMORY_MD_MAX_CLAIMS - 1 and edit["added"] == 1 and edit["invalidated"] == 1
    assert changed <= few + 2
