"""KeeperClient: one method per call of the worker protocol; retries 5xx and lost connections, never a 4xx."""

from __future__ import annotations

import email.utils
import logging
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

logger = logging.getLogger("keeper_client")


class KeeperError(Exception):
    """Keeper answered with an error: its status, reason code, message and details."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details or {}
        self.retry_after = retry_after  # seconds Keeper asked to wait (Retry-After), if it said


class KeeperConflict(KeeperError):
    """409: the run or operation moved on (stale revision, lost lease...). Never retried: nothing was written."""


@dataclass(frozen=True)
class Claim:
    run_id: str
    workflow: str
    workflow_version: str
    step: str
    state: dict[str, Any]
    revision: int
    attempt: int
    lease_epoch: int
    lease_token: str
    verified: str | None
    operations_in_doubt: list[dict[str, Any]] = field(default_factory=list)
    # A take-over whose operations in doubt only this worker's lookups can settle: answer lookups()
    # before anything else (Worker does, with its `lookups`); its answer is the claim to go on with.
    lookups_needed: bool = False
    # The run's received signals, oldest first: {"seq", "signal", "payload"} (keep the seq of the
    # last one you acted on in your state).
    signals: list[dict[str, Any]] = field(default_factory=list)


class KeeperClient:
    """`KeeperClient("https://keeper.example", "kp_...")`; every call is tenant-scoped by the key."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        traceparent: str | Callable[[], str | None] | None = None,
    ):
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        # A W3C trace context (or a function giving the current one, e.g. from your OpenTelemetry
        # propagator) sent as `traceparent` with each call, so Keeper's spans join your agent's trace.
        self.traceparent = traceparent
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1/",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def _trace_headers(self) -> dict[str, str]:
        value = self.traceparent() if callable(self.traceparent) else self.traceparent
        return {"traceparent": value} if value else {}

    def __enter__(self) -> KeeperClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(
        self,
        path: str,
        body: Any,
        *,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        stop: threading.Event | None = None,
    ) -> httpx.Response:
        """POST with retries on 5xx and transport errors (exponential backoff with jitter, at least what
        Retry-After asks, up to max_backoff); 4xx raise at once. The wait between tries ends when
        `stop` is set, and the last error is raised.

        Every call of the protocol is safe to repeat: a commit whose answer was lost comes back
        `replayed`, a prepare is idempotent by operation id, and a repeated move answers 409.
        """
        attempt = 0
        while True:
            told = 0.0
            try:
                response = self._http.post(
                    path,
                    json=body,
                    timeout=timeout or self.timeout,
                    headers={**self._trace_headers(), **(headers or {})},
                )
            except httpx.TransportError as exc:
                if attempt >= self.retries or (stop is not None and stop.is_set()):
                    raise
                logger.warning("keeper %s: %r; retrying", path, exc)
                failed: Exception = exc
            else:
                if response.status_code < 500:
                    if response.status_code >= 400:
                        raise _error(response)
                    return response
                failed = _error(response)
                if attempt >= self.retries or (stop is not None and stop.is_set()):
                    raise failed
                logger.warning("keeper %s answered %s; retrying", path, response.status_code)
                told = _retry_after(response) or 0.0
            delay = min(self.max_backoff, self.backoff * (2**attempt))
            if (stop or threading.Event()).wait(
                min(self.max_backoff, max(told, delay * (0.5 + random.random() / 2)))
            ):
                raise failed
            attempt += 1

    # --- workflows and runs ---------------------------------------------------------------------

    def register_workflow(
        self,
        name: str,
        version: str,
        steps: list[str],
        *,
        tools: list[dict[str, str]] | None = None,
        input_schema: dict[str, Any] | None = None,
        description: str = "",
        approval_guarded_steps: list[str] | None = None,
        signals: list[str] | None = None,
    ) -> dict[str, Any]:
        """Register (name, version); `signals`: the names its runs accept (POST .../signals/{name})."""
        body: dict[str, Any] = {"name": name, "version": version, "steps": steps, "description": description}
        for key, value in (
            ("tools", tools),
            ("input_schema", input_schema),
            ("approval_guarded_steps", approval_guarded_steps),
            ("signals", signals),
        ):
            if value is not None:
                body[key] = value
        return dict(self._post("workflows/external/", body).json())

    def start_run(
        self, workflow: str, input: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = self._http.post("runs/", json={"workflow": workflow, "input": input}, headers=headers)
        if response.status_code >= 400:
            raise _error(response)
        return dict(response.json())

    def signal(self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str) -> dict[str, Any]:
        """Send signal `name` to a run (the payload as the JSON body). The key names this signal: sent
        again with it (its answer lost), it is recorded once."""
        # Retried like the protocol's calls: the key makes a repeat record the signal once.
        response = self._post(
            f"runs/{run_id}/signals/{name}",
            {} if payload is None else payload,
            headers={"Idempotency-Key": idempotency_key},
        )
        return dict(response.json())

    # --- the worker protocol ------------------------------------------------------------------------

    def claim(
        self,
        workflows: list[str],
        *,
        wait_seconds: float = 20.0,
        worker_id: str = "worker",
        lease_ttl: float | None = None,
        stop: threading.Event | None = None,
    ) -> Claim | None:
        """A lease on the next ready step of these workflows, or None when none came within wait_seconds.
        A wait Keeper asks for (Retry-After) ends early when `stop` is set."""
        body: dict[str, Any] = {"workflows": workflows, "wait_seconds": wait_seconds, "worker_id": worker_id}
        if lease_ttl is not None:
            body["lease_ttl"] = lease_ttl
        response = self._post("workers/claim", body, timeout=wait_seconds + self.timeout, stop=stop)
        if response.status_code == 204:
            # Keeper's waiting claims were all taken, so this one looked once: wait as told, not longer
            # than this claim would have waited, so the next claim does not come back at once.
            told = _retry_after(response)
            if told is not None:
                (stop or threading.Event()).wait(min(told, wait_seconds))
            return None
        return _claim(response.json())

    def lookups(self, claim: Claim, answers: dict[str, dict[str, Any]]) -> Claim:
        """What your lookups found for a claim with `lookups_needed`: {operation_id: {"authoritative":
        bool, "applied": True | False | None, "external_ref": ..., "result": ...}}. Keeper's resume
        verification decides with them; the claim to go on with, or KeeperConflict resume_refused."""
        body = {
            "lease_token": claim.lease_token,
            "lookups": [{"operation_id": op_id, **answer} for op_id, answer in answers.items()],
        }
        return _claim(self._post(f"workers/runs/{claim.run_id}/lookups", body).json())

    def approval(
        self, claim: Claim, request: dict[str, Any], *, reasons: list[str] | None = None
    ) -> dict[str, Any]:
        """Ask for (or find) a person's approval of this exact request: {"verdict": "use" | "wait" |
        "rejected", "approval_id", "status", "request_digest", "expires_at", "reason", "detail"}. On
        "wait", commit a suspend with `reason` keeping {"approval": {"approval_id": ...},
        "request_digest": ...} in the state; a person's decision resumes the run."""
        body = {"lease_token": claim.lease_token, "request": request, "reasons": reasons or []}
        return dict(self._post(f"workers/runs/{claim.run_id}/approval", body).json())

    def commit(
        self,
        claim: Claim,
        state: dict[str, Any],
        *,
        next_step: str | None = None,
        suspend: dict[str, Any] | None = None,
        complete: dict[str, Any] | None = None,
        fail: dict[str, Any] | None = None,
        payload: dict[str, Any] | None = None,
        spent: dict[str, int | float] | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Exactly one of next_step, suspend {reason, detail}, complete {result}, fail {code, detail}.
        `spent`: {"tokens": an int, "cost_usd": a number, "wall_s": a number} (812.0 tokens is a 400)."""
        body: dict[str, Any] = {
            "lease_token": claim.lease_token,
            "expected_revision": expected_revision or claim.revision,
            "state": state,
            "payload": payload or {},
            "spent": spent or {},
        }
        for key, value in (
            ("next_step", next_step),
            ("suspend", suspend),
            ("complete", complete),
            ("fail", fail),
        ):
            if value is not None:
                body[key] = value
        return dict(self._post(f"workers/runs/{claim.run_id}/commit", body).json())

    def heartbeat(self, claim: Claim, *, lease_ttl: float | None = None) -> str:
        body: dict[str, Any] = {"lease_token": claim.lease_token}
        if lease_ttl is not None:
            body["lease_ttl"] = lease_ttl
        return str(self._post(f"workers/runs/{claim.run_id}/heartbeat", body).json()["lease_expires_at"])

    def release(self, claim: Claim, *, retry_in: float = 0.0, attempted: bool = False) -> None:
        """Give the run back. `attempted`: the step ran and failed (the try counts toward the run's
        attempts limit); a release without trying does not count."""
        body = {"lease_token": claim.lease_token, "retry_in": retry_in, "attempted": attempted}
        self._post(f"workers/runs/{claim.run_id}/release", body)

    def prepare(
        self,
        claim: Claim,
        operation_id: str,
        *,
        tool_name: str,
        tool_contract_version: str,
        request: dict[str, Any],
    ) -> dict[str, Any]:
        body = {
            "lease_token": claim.lease_token,
            "operation_id": operation_id,
            "tool_name": tool_name,
            "tool_contract_version": tool_contract_version,
            "request": request,
        }
        return dict(self._post(f"workers/runs/{claim.run_id}/operations/prepare", body).json())

    def started(
        self, claim: Claim, operation_id: str, *, call_timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Just before sending: only the lease holder may. `call_timeout_s`: the longest the call may
        take; until then a lookup's not_applied is refused (409 operation_in_flight, with Retry-After)."""
        path = f"workers/runs/{claim.run_id}/operations/{operation_id}/started"
        body: dict[str, Any] = {"lease_token": claim.lease_token}
        if call_timeout_s is not None:
            body["call_timeout_s"] = call_timeout_s
        return dict(self._post(path, body).json())

    def outcome(
        self,
        claim: Claim,
        operation_id: str,
        outcome: str,
        *,
        external_ref: str | None = None,
        result: Any = None,
        note: str = "",
    ) -> dict[str, Any]:
        """succeeded (with external_ref), failed (a definite no), unknown (no answer), not_applied (a lookup said so)."""
        body: dict[str, Any] = {"lease_token": claim.lease_token, "outcome": outcome, "note": note}
        if external_ref is not None:
            body["external_ref"] = external_ref
        if result is not None:
            body["result"] = result
        return dict(self._post(f"workers/runs/{claim.run_id}/operations/{operation_id}/outcome", body).json())


def _claim(d: dict[str, Any]) -> Claim:
    return Claim(
        run_id=d["run_id"],
        workflow=d["workflow"],
        workflow_version=d["workflow_version"],
        step=d["step"],
        state=d["state"],
        revision=d["revision"],
        attempt=d["attempt"],
        lease_epoch=d["lease_epoch"],
        lease_token=d["lease_token"],
        verified=d["verified"],
        operations_in_doubt=list(d["operations_in_doubt"]),
        signals=list(d.get("signals") or []),
        lookups_needed=bool(d.get("lookups_needed")),
    )


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds: a number of seconds (Keeper's) or an HTTP date (a proxy's); None if
    absent or unreadable."""
    told = response.headers.get("Retry-After", "").strip()
    try:
        seconds = float(told)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(told)
        except (TypeError, ValueError):
            return None
        seconds = (when - datetime.now(UTC)).total_seconds() if when.tzinfo else 0.0
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _error(response: httpx.Response) -> KeeperError:
    try:
        err = response.json().get("error", {})
    except ValueError:
        err = {}
    cls = KeeperConflict if response.status_code == 409 else KeeperError
    return cls(
        response.status_code,
        str(err.get("code", "http_error")),
        str(err.get("message", response.text[:200])),
        err.get("details") if isinstance(err.get("details"), dict) else {},
        _retry_after(response),
    )
