"""A worker loop around plain step functions: claim, run the step with heartbeats, commit, repeat.

A step function takes a StepContext and returns Next / Suspend / Complete / Fail. Side effects go
through `ctx.operation(...)`, which runs Keeper's protocol: prepare once, reconcile what is in
doubt, mark started, send with the idempotency key, report the outcome (a lost answer is unknown).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from keeper_client.client import Claim, KeeperClient, KeeperConflict, KeeperError

logger = logging.getLogger("keeper_client.worker")
State = dict[str, Any]


@dataclass(frozen=True)
class Next:
    state: State
    step: str


@dataclass(frozen=True)
class Suspend:
    state: State
    reason: str
    detail: str = ""
    step: str | None = None


@dataclass(frozen=True)
class Complete:
    state: State
    result: Any = None


@dataclass(frozen=True)
class Fail:
    state: State
    code: str
    detail: str = ""


StepResult = Next | Suspend | Complete | Fail


class OperationFailed(Exception):
    """The outside system said no (definitely): nothing was applied."""


class OperationInDoubt(Exception):
    """Nobody knows whether the outside system applied it; the run is suspended for reconciliation."""


@dataclass(frozen=True)
class Applied:
    external_ref: str
    result: Any = None


class LeaseLost(Exception):
    """This worker no longer holds the run: nothing more is sent or committed (its new holder goes on)."""


@dataclass
class StepContext:
    client: KeeperClient
    claim: Claim
    lease_lost: threading.Event = field(default_factory=threading.Event)

    def lease_check(self) -> None:
        """Raise LeaseLost unless this worker still holds the run (asked of Keeper, not remembered):
        called before every request sent outside, so a stale worker never sends an effect the run's
        new holder may have applied."""
        if self.lease_lost.is_set():
            raise LeaseLost(f"run {self.run_id}: the lease was lost; nothing sent")
        try:
            self.client.heartbeat(self.claim)
        except KeeperConflict as exc:
            self.lease_lost.set()
            raise LeaseLost(f"run {self.run_id}: {exc}") from exc

    def approval(self, request: dict[str, Any], *, reasons: list[str] | None = None) -> dict[str, Any]:
        """A person's decision on this exact request (see KeeperClient.approval)."""
        return self.client.approval(self.claim, request, reasons=reasons)

    @property
    def state(self) -> State:
        return dict(self.claim.state)

    @property
    def run_id(self) -> str:
        return self.claim.run_id

    @property
    def step(self) -> str:
        return self.claim.step

    def operation(
        self,
        operation_id: str,
        *,
        tool_name: str,
        tool_contract_version: str,
        request: dict[str, Any],
        send: Callable[[str], Applied],
        lookup: Callable[[str], Applied | None | bool] | None = None,
        call_timeout_s: float | None = None,
    ) -> Applied:
        """Apply a side effect at most once. `send(idempotency_key)` returns Applied or raises
        OperationFailed (a definite no); anything else it raises means the outcome is unknown.
        `lookup(key)` answers authoritatively: Applied, False (not applied) or None (cannot tell)."""
        client, claim = self.client, self.claim
        op = client.prepare(
            claim,
            operation_id,
            tool_name=tool_name,
            tool_contract_version=tool_contract_version,
            request=request,
        )
        key = op["idempotency_key"]
        if op["status"] == "succeeded":
            return Applied(op["external_ref"], op["result"])
        if op["status"] == "failed":
            raise OperationFailed(f"operation {operation_id} failed before: {op['result']}")
        if op["status"] in ("started", "unknown"):
            found = lookup(key) if lookup is not None else None
            if isinstance(found, Applied):
                client.outcome(
                    claim,
                    operation_id,
                    "succeeded",
                    external_ref=found.external_ref,
                    result=found.result,
                    note="worker lookup: applied",
                )
                return found
            if found is False:
                client.outcome(claim, operation_id, "not_applied", note="worker lookup: not applied")
            else:
                if op["status"] == "started":
                    client.outcome(
                        claim, operation_id, "unknown", note="in doubt and no authoritative lookup"
                    )
                raise OperationInDoubt(f"operation {operation_id} may have been applied; reconcile it")
        try:
            client.started(claim, operation_id, call_timeout_s=call_timeout_s)
        except KeeperConflict as exc:
            if exc.details.get("status") != "started":  # our own earlier call whose answer was lost is fine
                raise
        self.lease_check()
        try:
            applied = send(key)
        except OperationFailed as exc:
            client.outcome(claim, operation_id, "failed", result={"error": str(exc)[:500]})
            raise
        except Exception as exc:
            client.outcome(claim, operation_id, "unknown", note=f"no answer: {exc!r}"[:500])
            raise OperationInDoubt(f"operation {operation_id}: {exc!r}") from exc
        client.outcome(
            claim, operation_id, "succeeded", external_ref=applied.external_ref, result=applied.result
        )
        return applied


StepFn = Callable[[StepContext], StepResult]


Lookup = Callable[[str], Applied | None | bool]


class Worker:
    """Serves one or more external workflows: `Worker(client, {"wf": {"step": fn, ...}}).run()`.

    `lookups` ({tool_name: lookup(idempotency_key)}) answer for operations in doubt when this worker
    takes a run over after a crash: Applied, False (not applied) or None (cannot tell). A tool without
    one is reported "cannot tell", and a person reconciles it."""

    def __init__(
        self,
        client: KeeperClient,
        steps: dict[str, dict[str, StepFn]],
        *,
        lookups: dict[str, Lookup] | None = None,
        worker_id: str = "worker",
        wait_seconds: float = 20.0,
        lease_ttl: float | None = None,
        heartbeat_every: float | None = None,
    ):
        self.client, self.steps, self.worker_id = client, steps, worker_id
        self.lookups = dict(lookups or {})
        self.wait_seconds, self.lease_ttl = wait_seconds, lease_ttl
        self.heartbeat_every = heartbeat_every or max(0.2, (lease_ttl or 30.0) / 3)
        self.stop = threading.Event()

    def run(self, *, max_claims: int | None = None) -> int:
        """Claim and run steps until stopped (or `max_claims` steps ran); the number of steps run."""
        done = 0
        while not self.stop.is_set() and (max_claims is None or done < max_claims):
            try:
                ran = self.run_once()
            except (KeeperError, httpx.TransportError) as exc:  # retries exhausted: wait, claim again
                logger.warning("keeper unavailable: %r", exc)
                told = exc.retry_after if isinstance(exc, KeeperError) else None
                self.stop.wait(min(told, 60.0) if told else 1.0)  # a 429 or 503 says how long
                continue
            done += int(ran)
        return done

    def run_once(self) -> bool:
        claim = self.client.claim(
            sorted(self.steps),
            wait_seconds=self.wait_seconds,
            worker_id=self.worker_id,
            lease_ttl=self.lease_ttl,
            stop=self.stop,
        )
        if claim is None:
            return False
        if claim.lookups_needed:
            try:
                claim = self.client.lookups(claim, self._look_up(claim))
            except KeeperConflict as exc:  # refused: a person reconciles (the run is in their inbox)
                logger.info("run %s: %s", claim.run_id, exc)
                return True
        fn = self.steps.get(claim.workflow, {}).get(claim.step)
        if fn is None:
            self._commit(
                claim, Suspend(claim.state, "unknown_step", f"this worker has no step {claim.step!r}")
            )
            return True
        ctx = StepContext(self.client, claim)
        step_done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(ctx, step_done), daemon=True)
        beat.start()
        try:
            result = fn(ctx)
        except OperationInDoubt as exc:
            result = Suspend(claim.state, "reconciliation_required", str(exc)[:2000])
        except OperationFailed as exc:
            result = Fail(claim.state, "operation_failed", str(exc)[:2000])
        except KeeperConflict as exc:
            if exc.code == "operation_in_flight":  # a first call may still be on its way: look later
                wait = float(exc.details.get("retry_after") or 1)
                self._quietly(lambda: self.client.release(claim, retry_in=wait))
            else:  # the lease or the run moved on: its new holder continues
                logger.info("run %s: %s", claim.run_id, exc)
            return True
        except LeaseLost as exc:
            logger.info("run %s: %s", claim.run_id, exc)
            return True
        except Exception:
            logger.exception("step %s of run %s raised; giving the run back", claim.step, claim.run_id)
            self._quietly(lambda: self.client.release(claim, retry_in=1.0, attempted=True))
            return True
        finally:
            step_done.set()  # stops the heartbeat thread
            beat.join(timeout=5)
        self._commit(claim, result)
        return True

    def _look_up(self, claim: Claim) -> dict[str, dict[str, Any]]:
        """Each operation in doubt, looked up by its idempotency key with this worker's lookup for its
        tool; what Keeper's resume verification decides with."""
        answers: dict[str, dict[str, Any]] = {}
        for op in claim.operations_in_doubt:
            lookup = self.lookups.get(str(op.get("tool_name")))
            try:
                found = lookup(op["operation_id"]) if lookup is not None else None
            except Exception:  # a lookup that failed is no answer: a person reconciles
                logger.exception("lookup of %s failed", op["operation_id"])
                found = None
            if isinstance(found, Applied):
                answers[op["operation_id"]] = {"authoritative": True, "applied": True,
                                               "external_ref": found.external_ref, "result": found.result}  # fmt: skip
            elif found is False:
                answers[op["operation_id"]] = {"authoritative": True, "applied": False}
            else:
                answers[op["operation_id"]] = {"authoritative": False, "applied": None}
        return answers

    def _heartbeat(self, ctx: StepContext, step_done: threading.Event) -> None:
        """Renew the lease every `heartbeat_every` seconds until the step returns; a 409 sets lease_lost."""
        while not step_done.wait(self.heartbeat_every) and not ctx.lease_lost.is_set():
            try:
                self.client.heartbeat(ctx.claim, lease_ttl=self.lease_ttl)
            except KeeperConflict:
                logger.warning("run %s: lease lost during step %s", ctx.run_id, ctx.step)
                ctx.lease_lost.set()
            except (KeeperError, httpx.TransportError) as exc:
                logger.warning("heartbeat failed: %r", exc)

    def _commit(self, claim: Claim, result: StepResult) -> None:
        try:
            if isinstance(result, Next):
                self.client.commit(claim, result.state, next_step=result.step)
            elif isinstance(result, Suspend):
                body: dict[str, Any] = {"reason": result.reason, "detail": result.detail}
                if result.step:
                    body["step"] = result.step
                self.client.commit(claim, result.state, suspend=body)
            elif isinstance(result, Complete):
                self.client.commit(claim, result.state, complete={"result": result.result})
            else:
                self.client.commit(claim, result.state, fail={"code": result.code, "detail": result.detail})
        except KeeperConflict as exc:  # never retried: another worker holds the run now
            logger.info("commit of run %s refused: %s", claim.run_id, exc)

    @staticmethod
    def _quietly(call: Callable[[], Any]) -> None:
        try:
            call()
        except (KeeperError, httpx.TransportError) as exc:
            logger.warning("%r", exc)
