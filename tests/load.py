"""Two tenants' concurrent load on a running Keeper (web, a threads worker and beat, started here with
the DATABASE_URL given): API clients and console users of each tenant over real HTTP, counting what
the answers show of the other tenant (leaks), what they fail to show of their own (missing), 5xx and
broken connections (errors), and the runs that do not finish.

Used side by side, straight on PostgreSQL and through PgBouncer (tests/core/test_tenancy_pooled_load.py).
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import requests

from core.processes import web_args
from core.tenancy import tenant_bind
from runs.kernel.models import AgentRun
from tests.processes import ProcessGroup, free_port, wait_until

RUN_ID = re.compile(r"/runs/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/")


@dataclass
class Tally:
    """Counts of one phase, shared by its client threads (each count with its first few examples)."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, example: str = "", n: int = 1) -> None:
        with self.lock:
            self.counts[kind] += n
            if example and len(self.examples.setdefault(kind, [])) < 5:
                self.examples[kind].append(example[:300])


@dataclass
class TenantSide:
    """What one tenant's clients know: their key, their seeded objects and the runs they started."""

    slug: str
    key: str
    console_cookie: str
    workflow: str  # its external workflow's name (RLS alone protects the list)
    memory_value: str  # its claim about subject c-1
    runs: set[str] = field(default_factory=set)
    refunds: dict[str, str] = field(default_factory=dict)  # run id -> the client that started it
    lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, run_id: str, *, refund_of: str | None = None) -> None:
        with self.lock:
            self.runs.add(run_id)
            if refund_of:
                self.refunds[run_id] = refund_of

    def some_run(self) -> str | None:
        with self.lock:
            return random.choice(sorted(self.runs)) if self.runs else None


class Phase:
    """One load against one Keeper: its tallies and the tenants' sides."""

    def __init__(self, base: str, sides: dict[str, TenantSide]) -> None:
        self.base = base
        self.sides = sides
        self.tally = Tally()

    def other(self, side: TenantSide) -> TenantSide:
        [other] = [s for s in self.sides.values() if s is not side]
        return other

    def call(
        self, session: requests.Session, method: str, path: str, **kwargs: Any
    ) -> requests.Response | None:
        """One request; a broken connection or a 5xx counts as an error (None for the former)."""
        self.tally.add("requests")
        try:
            response = session.request(method, self.base + path, timeout=60, **kwargs)
        except requests.RequestException as exc:
            self.tally.add("errors", f"{method} {path}: {type(exc).__name__}: {exc}")
            return None
        if response.status_code >= 500:
            self.tally.add("errors", f"{method} {path}: {response.status_code} {response.text[:200]}")
        return response

    def expect(self, response: requests.Response | None, what: str, *statuses: int) -> bool:
        """The answer has one of `statuses`; a 404 about one's own object is missing, other codes unexpected."""
        if response is None or response.status_code >= 500:
            return False
        if response.status_code in statuses:
            return True
        kind = "missing" if response.status_code == 404 else "unexpected"
        self.tally.add(kind, f"{what}: {response.status_code} {response.text[:200]}")
        return False


class ApiClient(threading.Thread):
    """An agent application of one tenant: starts countdowns and refunds, approves its own refunds,
    reads its runs back, lists runs, external workflows and memory, and searches memory."""

    def __init__(self, phase: Phase, side: TenantSide, name: str, deadline: float) -> None:
        super().__init__(name=name, daemon=True)
        self.phase, self.side, self.deadline = phase, side, deadline
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {side.key}"

    def run(self) -> None:
        actions = [
            self.start_countdown,
            self.read_own_run,
            self.list_runs,
            self.start_refund,
            self.list_external_workflows,
            self.read_memory,
            self.read_own_run,
            self.search_memory,
            self.approve_own_refunds,
        ]
        i = random.randrange(len(actions))
        while time.monotonic() < self.deadline:
            actions[i % len(actions)]()
            i += 1

    def start_countdown(self) -> None:
        body = {"workflow": "demo.countdown", "input": {"n": 3}}
        response = self.phase.call(self.session, "POST", "/api/v1/runs/", json=body)
        if self.phase.expect(response, "start countdown", 201):
            self.check_run(response.json(), "started countdown")  # type: ignore[union-attr]
            self.side.started(response.json()["run_id"])  # type: ignore[union-attr]

    def start_refund(self) -> None:
        order_id = f"{self.side.slug}-{uuid.uuid4().hex[:12]}"
        delivered = (datetime.now(UTC) - timedelta(days=3)).isoformat()
        order = {
            "order_id": order_id,
            "customer_id": "c-1",
            "amount_minor": 2500,
            "currency": "EUR",
            "status": "delivered",
            "delivered_at": delivered,
        }
        if not self.phase.expect(
            self.phase.call(self.session, "POST", "/sandbox/orders", json=order), "order", 200, 201
        ):
            return
        body = {"workflow": "refund", "input": {"order_id": order_id, "reason": "arrived broken"}}
        response = self.phase.call(self.session, "POST", "/api/v1/runs/", json=body)
        if self.phase.expect(response, "start refund", 201):
            self.check_run(response.json(), "started refund")  # type: ignore[union-attr]
            self.side.started(response.json()["run_id"], refund_of=self.name)  # type: ignore[union-attr]

    def check_run(self, run: dict[str, Any], what: str) -> None:
        if run.get("tenant") != self.side.slug:
            self.phase.tally.add("leaks", f"{what}: {self.side.slug} got a run of {run.get('tenant')}")

    def read_own_run(self) -> None:
        run_id = self.side.some_run()
        if run_id is None:
            return
        response = self.phase.call(self.session, "GET", f"/api/v1/runs/{run_id}/")
        if self.phase.expect(response, f"own run {run_id}", 200):
            self.check_run(response.json(), "own run")  # type: ignore[union-attr]

    def list_runs(self) -> None:
        response = self.phase.call(self.session, "GET", "/api/v1/runs/", params={"limit": 50})
        if not self.phase.expect(response, "run list", 200):
            return
        results = response.json()["results"]  # type: ignore[union-attr]
        if not results:  # the tenant has a seeded run before any load: never empty
            self.phase.tally.add("missing", f"{self.side.slug}'s run list came back empty")
        for run in results:
            self.check_run(run, "run list")

    def list_external_workflows(self) -> None:
        response = self.phase.call(self.session, "GET", "/api/v1/workflows/external/")
        if not self.phase.expect(response, "external workflows", 200):
            return
        names = {w["name"] for w in response.json()}  # type: ignore[union-attr]
        if self.side.workflow not in names:
            self.phase.tally.add(
                "missing", f"{self.side.slug}'s external workflow not listed: {sorted(names)}"
            )
        if names - {self.side.workflow}:
            self.phase.tally.add("leaks", f"{self.side.slug} listed {sorted(names - {self.side.workflow})}")

    def _memory_values(self, values: list[Any], what: str) -> None:
        if self.side.memory_value not in values:
            self.phase.tally.add("missing", f"{self.side.slug}'s claim not in its {what}: {values}")
        if set(values) - {self.side.memory_value}:
            self.phase.tally.add("leaks", f"{self.side.slug}'s {what} held {sorted(map(str, values))}")

    def read_memory(self) -> None:
        response = self.phase.call(self.session, "GET", "/api/v1/memory/items/", params={"subject_id": "c-1"})
        if self.phase.expect(response, "memory items", 200):
            self._memory_values([i["value"] for i in response.json()["results"]], "memory items")  # type: ignore[union-attr]

    def search_memory(self) -> None:
        params = {"query": "which language does the customer speak", "subject_id": "c-1", "k": 5}
        response = self.phase.call(self.session, "GET", "/api/v1/memory/search/", params=params)
        if self.phase.expect(response, "memory search", 200):
            hits = response.json()["results"]  # type: ignore[union-attr]
            self._memory_values([h["item"]["value"] for h in hits], "memory search")

    def approve_own_refunds(self) -> None:
        approve_pending(self.phase, self.side, self.session, only_client=self.name)


def approve_pending(
    phase: Phase, side: TenantSide, session: requests.Session, *, only_client: str | None = None
) -> None:
    """Approve the pending approvals of this side's refunds (only those `only_client` started, if
    given, so two clients never decide the same one); any approval of another tenant is a leak."""
    response = phase.call(session, "GET", "/api/v1/approvals/", params={"status": "pending"})
    if not phase.expect(response, "approval list", 200):
        return
    other = phase.other(side)
    for approval in response.json()["results"]:  # type: ignore[union-attr]
        run_id = str(approval["run_id"])
        if approval["tenant"] != side.slug or run_id in other.runs:
            phase.tally.add("leaks", f"{side.slug} listed an approval of {approval['tenant']} ({run_id})")
            continue
        with side.lock:
            mine = run_id in side.refunds and (only_client is None or side.refunds[run_id] == only_client)
        if mine:
            decided = phase.call(
                session, "POST", f"/api/v1/approvals/{approval['approval_id']}/approve", json={"note": "load"}
            )
            phase.expect(decided, f"approve {approval['approval_id']}", 200, 409)


class ConsoleUser(threading.Thread):
    """An engineer of one tenant in the console: the run list and its own runs' pages."""

    def __init__(self, phase: Phase, side: TenantSide, deadline: float, cookie_name: str) -> None:
        super().__init__(name=f"console-{side.slug}", daemon=True)
        self.phase, self.side, self.deadline = phase, side, deadline
        self.session = requests.Session()
        self.session.cookies.set(cookie_name, side.console_cookie)

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            response = self.phase.call(self.session, "GET", "/runs/", allow_redirects=False)
            if self.phase.expect(response, "console run list", 200):
                self.check_page(response.text, "run list")  # type: ignore[union-attr]
            run_id = self.side.some_run()
            if run_id is not None:
                response = self.phase.call(self.session, "GET", f"/runs/{run_id}/", allow_redirects=False)
                if self.phase.expect(response, f"console run {run_id}", 200):
                    self.check_page(response.text, "run page")  # type: ignore[union-attr]

    def check_page(self, html: str, what: str) -> None:
        theirs = set(RUN_ID.findall(html)) & self.phase.other(self.side).runs
        if theirs:
            self.phase.tally.add(
                "leaks", f"{self.side.slug}'s console {what} linked {len(theirs)} runs of theirs"
            )


class FreshClients(threading.Thread):
    """Clients that never set a tenant, connecting now and then: any row they see is a leak."""

    def __init__(self, phase: Phase, database_url: str, deadline: float, statements: int) -> None:
        super().__init__(name="fresh-clients", daemon=True)
        self.phase, self.url, self.deadline, self.statements = phase, database_url, deadline, statements

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            try:
                with psycopg.connect(self.url, autocommit=True, prepare_threshold=None) as conn:
                    for _ in range(self.statements):
                        seen = conn.execute("SELECT count(*) FROM agent_runs").fetchone()[0]  # type: ignore[index]
                        self.phase.tally.add("fresh_client_checks")
                        if seen:
                            self.phase.tally.add("fresh_client_rows", f"a new client saw {seen} runs", n=seen)
            except psycopg.Error as exc:
                self.phase.tally.add("errors", f"fresh client: {exc}")
            time.sleep(0.5)


@dataclass
class Deployment:
    """Keeper's processes as `make run` starts them (gunicorn 2 x 4 threads, a threads worker, beat)."""

    base: str
    database_url: str


def deploy(
    processes: ProcessGroup, *, database_url: str, env: dict[str, str], workers: int = 4
) -> Deployment:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    common = {
        "DATABASE_URL": database_url,
        "KEEPER_SANDBOX_URL": f"{base}/sandbox",
        "KEEPER_API_RATE": "1000000/min",
        "KEEPER_LOG_LEVEL": "WARNING",
        **env,
    }
    processes.script(web_args("127.0.0.1", port), env={**common, "WEB_CONCURRENCY": "2"})
    processes.worker(pool="threads", concurrency=workers, env={**common, "KEEPER_WORKER_POOL": "threads"})
    processes.beat(common)
    wait_until(lambda: _healthy(base), timeout=90, interval=0.3, message="the web server to answer")
    return Deployment(base, database_url)


def _healthy(base: str) -> bool:
    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def run_load(
    deployment: Deployment,
    sides: dict[str, TenantSide],
    *,
    clients: int,
    seconds: float,
    drain_seconds: float,
    cookie_name: str,
    fresh_statements: int,
) -> dict[str, Any]:
    """`clients` API clients and one console user per tenant for `seconds`, then up to `drain_seconds`
    for every run they started to finish (their refunds approved); the phase's figures."""
    phase = Phase(deployment.base, sides)
    before = {slug: set(side.runs) for slug, side in sides.items()}
    t0 = time.monotonic()
    deadline = t0 + seconds
    threads: list[threading.Thread] = [
        FreshClients(phase, deployment.database_url, deadline, fresh_statements)
    ]
    for side in sides.values():
        threads += [ApiClient(phase, side, f"api-{side.slug}-{i}", deadline) for i in range(clients)]
        threads.append(ConsoleUser(phase, side, deadline, cookie_name))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 120)
    started = {run_id: side for slug, side in sides.items() for run_id in side.runs - before[slug]}
    unfinished = _drain(phase, sides, started, until=time.monotonic() + drain_seconds)
    counts = phase.tally.counts
    return {
        "requests": counts["requests"],
        "leaks": counts["leaks"],
        "missing": counts["missing"],
        "errors": counts["errors"],
        "unexpected": counts["unexpected"],
        "fresh_client_rows": counts["fresh_client_rows"],
        "fresh_client_checks": counts["fresh_client_checks"],
        "runs_started": len(started),
        "runs_finished": len(started) - sum(unfinished.values()),
        "unfinished": dict(unfinished),
        "seconds": round(time.monotonic() - t0, 1),
        "examples": phase.tally.examples,
    }


def _drain(
    phase: Phase, sides: dict[str, TenantSide], started: dict[str, TenantSide], *, until: float
) -> Counter[str]:
    """Approve what still waits for it and wait for the runs to finish (straight on PostgreSQL: what
    the database says happened); the runs not completed, by status and suspend reason."""
    sessions = {slug: requests.Session() for slug in sides}
    for slug, side in sides.items():
        sessions[slug].headers["Authorization"] = f"Bearer {side.key}"
    while True:
        left: Counter[str] = Counter()
        for side in sides.values():
            ids = [run_id for run_id, owner in started.items() if owner is side]
            with tenant_bind(_tenant_id(side.slug)):
                rows = list(AgentRun.objects.filter(run_id__in=ids).values_list("status", "suspend_reason"))
            left.update(f"{status}:{reason or '-'}" for status, reason in rows if status != "completed")
            if len(rows) < len(ids):
                left["not in the database"] += len(ids) - len(rows)
            if any(status == "suspended" and reason == "approval_required" for status, reason in rows):
                approve_pending(phase, side, sessions[side.slug])
        moving = any(key.startswith(("running:", "suspended:approval_required")) for key in left)
        if not moving or time.monotonic() > until:
            return left
        time.sleep(0.5)


def _tenant_id(slug: str) -> uuid.UUID:
    from core.models import Tenant

    return Tenant.objects.get(slug=slug).tenant_id
