"""Schemathesis against the live API with a write key of one tenant: no 5xx, responses as the schema
says, bad input refused with the error body, and never a byte of the other tenant's data."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from core.api_auth import ApiKeyRateThrottle, api_key_create
from core.tenancy import tenant_ensure
from tests.api.conftest import seed_tenant

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THEIRS: dict[str, Any] = {}  # tenant B's ids and name: never in a response to tenant A's key
IDS: dict[str, dict[str, Any]] = {}  # the path parameters of each tenant's seeded objects
MAX_EXAMPLES = int(os.environ.get("KEEPER_FUZZ_EXAMPLES", "20"))


@pytest.fixture
def api_schema(live_server, monkeypatch):
    monkeypatch.setattr(
        ApiKeyRateThrottle, "THROTTLE_RATES", {**ApiKeyRateThrottle.THROTTLE_RATES, "api_key": "100000/min"}
    )
    ours, theirs = tenant_ensure(slug="acme", name="Acme"), tenant_ensure(slug="globex", name="Globex")
    IDS.update(ours=seed_tenant(ours), theirs=seed_tenant(theirs))
    THEIRS.clear()
    THEIRS.update(
        # a subject id is each tenant's own name (both seed "c-1"), no object of theirs
        {k: str(v) for k, v in IDS["theirs"].items() if k not in ("pk", "subject")},
        tenant="globex",
        tenant_id=str(theirs.tenant_id),
    )
    key = api_key_create(tenant=ours, name="fuzz", scope="write").plaintext
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json")
    schema.config.update(base_url=live_server.url, headers={"Authorization": f"Bearer {key}"})
    return schema


def no_cross_tenant_data(ctx: Any, response: Any, case: Any) -> bool | None:
    """A response of a tenant-A key never carries an id or the name of tenant B (unless the request did)."""
    text = response.content.decode(errors="replace")
    request = response.request
    body = (
        request.body.decode(errors="replace") if isinstance(request.body, bytes) else str(request.body or "")
    )
    sent = unquote(str(request.uri if hasattr(request, "uri") else request.url)) + body
    leaked = sorted(name for name, value in THEIRS.items() if value and value in text and value not in sent)
    if leaked:
        raise AssertionError(f"response carries tenant B's {', '.join(leaked)}: {text[:300]}")
    return None


def error_body_on_4xx(ctx: Any, response: Any, case: Any) -> bool | None:
    if 400 <= response.status_code < 500 and response.status_code != 405:
        try:
            body = json.loads(response.content)
        except ValueError:
            raise AssertionError(
                f"{response.status_code} without the error body: {response.content[:300]!r}"
            ) from None
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    no_cross_tenant_data,
    error_body_on_4xx,
]


def _why(failure: BaseException) -> str:
    """The failure and, for Hypothesis's groups (a flaky example, several distinct failures), each of
    the exceptions inside: the group's own text names none of them."""
    text = f"{type(failure).__name__}: {failure}"
    for inner in getattr(failure, "exceptions", ()):
        text += "\n  - " + _why(inner).replace("\n", "\n    ")
    return text


def test_the_api_survives_fuzzing(api_schema) -> None:
    # The pytest plugin of schemathesis 4.32 does not run on pytest 9 (it sets `node._nodeid`):
    # drive every operation through its Hypothesis strategy instead, valid and invalid data both.
    failures: dict[str, str] = {}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 30
    with requests.Session() as session:
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(
                    max_examples=MAX_EXAMPLES,
                    deadline=None,
                    suppress_health_check=list(HealthCheck),
                    derandomize=True,
                    database=None,
                    phases=[Phase.explicit, Phase.generate],
                )
                def fuzz(case):
                    case.call_and_validate(session=session, checks=CHECKS)

                try:
                    fuzz()
                except Unsatisfiable:
                    # An operation with no parameter and no body (a plain list) has nothing to make
                    # invalid: its negative mode cannot generate a case; its positive mode ran.
                    if mode is not GenerationMode.NEGATIVE:
                        raise
                except (
                    Exception,
                    BaseExceptionGroup,
                ) as failure:  # every operation's failure, reported at the end
                    failures[f"{operation.label} ({mode.value})"] = _why(failure)[:4000]
    assert not failures, "\n\n".join(f"{label}: {text}" for label, text in failures.items())


def not_a_success(ctx: Any, response: Any, case: Any) -> bool | None:
    assert response.status_code >= 400, (
        f"{response.status_code} on tenant B's object: {response.content[:300]!r}"
    )
    return None


@pytest.mark.parametrize("whose", ["ours", "theirs"])
def test_fuzzing_the_seeded_objects(api_schema, whose) -> None:
    """The same with the path parameters of real objects: our own (the code paths past the lookup)
    and tenant B's (every answer a 4xx, never a 2xx, never their data)."""
    failures: dict[str, str] = {}
    with requests.Session() as session:
        for operation in [result.ok() for result in api_schema.get_all_operations()]:
            names = [parameter.name for parameter in operation.path_parameters]
            if not names:
                continue
            fixed = {name: IDS[whose][name] for name in names}
            # A subject id names no object of tenant B: the same name in our tenant is our subject
            # (its MEMORY.md is ours, empty or not), so only the other checks apply to it.
            theirs_refused = whose == "theirs" and "subject" not in names
            checks = [*CHECKS, not_a_success] if theirs_refused else CHECKS

            @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE, path_parameters=fixed))
            @settings(
                max_examples=max(MAX_EXAMPLES // 2, 1),
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],
            )
            def fuzz(case):
                # called in this iteration only, so `checks` is this operation's
                case.call_and_validate(session=session, checks=checks)  # noqa: B023

            try:
                fuzz()
            except (
                Exception,
                BaseExceptionGroup,
            ) as failure:  # every operation's failure, reported at the end
                failures[operation.label] = _why(failure)[:4000]
    assert not failures, "\n\n".join(f"{label}: {text}" for label, text in failures.items())
