"""Two worker "hosts" (a Celery worker and a beat each, a local folder each, no shared disk), one web
process, PostgreSQL through PgBouncer in transaction mode, Redis and an S3-protocol server: a run
whose host is SIGKILLed mid-step finishes on the other host from the bucket, two beats fire each
schedule once per slot, and each webhook event is delivered once."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest

import tests.workers.two_host_flows  # noqa: F401 - registers test.two_hosts in this process
from core.api_auth import api_key_create
from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.workspace import workspace_files_at
from runs.engine.workspace_models import WorkspaceSnapshot
from runs.kernel.models import AgentEvent, AgentRun
from runs.webhooks.models import WebhookDelivery
from tests.processes import ProcessGroup, wait_until, web_serve
from tests.s3 import S3, s3, s3_server  # noqa: F401 - the fixtures
from tests.workers.two_host_flows import HOST_VARIABLE

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MODULES = "tests.workflows,tests.workers.two_host_flows"


@dataclass
class Host:
    """A machine of its own: a worker and a beat, with a folder nothing else sees."""

    name: str
    folder: Path
    worker: Popen[bytes]
    beat: Popen[bytes]


@dataclass
class Deployment:
    hosts: list[Host]
    web: str
    key: str

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.web + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return dict(json.loads(answer.read() or b"{}"))

    def host_of(self, identity: str) -> Host:
        """The host whose worker process wrote `identity` (host:pid[:thread]) as lease owner or actor."""
        pid = int(identity.split(":")[1])
        [host] = [h for h in self.hosts if h.worker.pid == pid]
        return host


def _deploy(
    processes: ProcessGroup,
    s3: S3,  # noqa: F811
    tenant,
    tmp_path: Path,
    env: dict[str, str] | None = None,
) -> Deployment:
    """Hosts a and b and the web process, every one through PgBouncer (the test's own connection is
    too: through_pgbouncer) with its artifacts in the bucket and its own KEEPER_DATA_DIR."""
    common = {
        **s3.env(),
        "KEEPER_WORKFLOW_MODULES": MODULES,
        "KEEPER_WEBHOOKS_ALLOW_HTTP": "true",
        "KEEPER_WEBHOOKS_ALLOW_PRIVATE": "true",  # the receiver listens on 127.0.0.1
        **(env or {}),
    }

    def local(name: str) -> dict[str, str]:
        folder = tmp_path / name
        folder.mkdir()
        return {"KEEPER_DATA_DIR": str(folder), "KEEPER_ARTIFACT_ROOT": str(folder / "artifacts")}

    hosts = []
    for name in ("a", "b"):
        own = {**common, **local(f"host-{name}"), HOST_VARIABLE: name}
        worker = processes.worker(pool="threads", concurrency=2, env=own)
        hosts.append(Host(name, tmp_path / f"host-{name}", worker, processes.beat(own)))
    web, base = web_serve(tmp_path / "web.log", env={**common, **local("web")})
    processes.procs.append(web)  # reaped with the hosts
    key = api_key_create(tenant=tenant, name="two-hosts", scope="write").plaintext
    return Deployment(hosts=hosts, web=base, key=key)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_a_run_whose_host_is_killed_mid_step_finishes_on_the_other_host_from_the_bucket(
    through_pgbouncer,
    tenant,
    s3: S3,  # noqa: F811
    processes,
    tmp_path,
):
    # One slice for both steps (the host that gathers is the one killed), a snapshot after each step.
    env = {"KEEPER_SLICE_MS": "60000", "KEEPER_WORKSPACE_SNAPSHOT_STEPS": "1"}
    deployment = _deploy(processes, s3, tenant, tmp_path, env)
    started = deployment.api(
        "POST", "/api/v1/runs/", {"workflow": "test.two_hosts", "input": {"topic": "refunds", "hold_s": 60}}
    )
    run_id = started["run_id"]
    wait_until(
        lambda: (
            AgentRun.objects.filter(run_id=run_id, next_step="write_up", lease_owner__isnull=False).exists()
            and WorkspaceSnapshot.objects.filter(run_id=run_id).exists()
        ),
        timeout=60,
        message="a host to gather, snapshot the workspace and hold the run in write_up",
    )
    a = deployment.host_of(str(AgentRun.objects.get(run_id=run_id).lease_owner))
    [b] = [h for h in deployment.hosts if h is not a]
    processes.kill(a.worker)  # host a loses power: its worker and its beat
    processes.kill(a.beat)
    assert a.worker.returncode == -signal.SIGKILL

    # The last snapshot is written right after the completion commits: wait for both.
    wait_until(
        lambda: (
            WorkspaceSnapshot.objects.filter(run_id=run_id, reason="finished").exists()
            or AgentRun.objects.get(run_id=run_id).status not in ("running", "completed")
            or AgentEvent.objects.filter(
                run_id=run_id, event_type__in=["resume_refused", "step_error"]
            ).exists()
        ),
        timeout=60,
        message="host b to take the run over, finish it and snapshot its workspace",
    )
    run = AgentRun.objects.get(run_id=run_id)
    events = {e.event_type + ":" + (e.step_id or ""): e for e in AgentEvent.objects.filter(run=run)}
    assert run.status == "completed", (run.suspend_reason, run.suspend_detail, sorted(events))
    # Who did what: a gathered; b took the lease over from a, verified, and wrote the report.
    assert deployment.host_of(events["step_completed:gather"].actor) is a
    [takeover] = AgentEvent.objects.filter(run=run, event_type="resume_verified")
    assert takeover.payload["trigger"] == "lease_takeover"
    assert deployment.host_of(takeover.actor) is b
    assert deployment.host_of(takeover.payload["previous_owner"]) is a
    assert deployment.host_of(events["run_completed:write_up"].actor) is b
    # Resume verification on b read the state's stored tool result back from the bucket.
    [artifacts] = [c for c in takeover.payload["checks"] if c["name"] == "artifacts_and_contracts"]
    assert artifacts["ok"] and artifacts["detail"].startswith("1 artifact(s)"), artifacts
    # b's step read a's workspace file and a's tool result, byte for byte.
    state, result = run.state, run.result
    assert isinstance(state, dict) and isinstance(result, dict)
    assert (state["gathered_on"], result["finished_on"]) == (a.name, b.name)
    assert result["findings"] == f"# refunds\nfound on host {a.name}\n"
    search = state["search_result"]
    assert result["search_result"] == search
    assert result["search_sha256"] == search["digest"]

    # Every blob the run names: on no host's disk (b had nothing of a's to read but the bucket), and
    # in the bucket under the tenant's prefix, its bytes hashing to its digest.
    _, files = workspace_files_at(run_id=run.run_id)
    assert sorted(files) == ["notes/findings.md", "report.md"]
    named = {search["digest"], *(ref["digest"] for ref in files.values())}
    hexdigests = {d.removeprefix("sha256:") for d in named}
    assert len(hexdigests) == 3  # the two files and the tool result
    for host in deployment.hosts:
        local = {hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(host.folder)}
        assert not local & hexdigests, (host.name, _files(host.folder))
    assert _files(b.folder) == [], _files(b.folder)
    bucket = s3.client()
    for hexdigest in hexdigests:
        body = bucket.get_object(Bucket=s3.bucket, Key=f"{tenant.tenant_id}/{hexdigest[:2]}/{hexdigest}")
        assert hashlib.sha256(body["Body"].read()).hexdigest() == hexdigest

    # The web process (the third machine) serves the finished run.
    served = deployment.api("GET", f"/api/v1/runs/{run_id}/")
    assert (served["status"], served["result"]) == ("completed", result)


def _slot(key: str | None) -> str:
    """The slot of a scheduled run's idempotency key, `schedule:<id>:<slot>`."""
    found = re.fullmatch(r"schedule:[0-9a-f-]{36}:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ).*", key or "")
    assert found, key
    return found.group(1)


SCHEDULES = 4
SLOTS = 4  # at least, per schedule


def test_two_beats_fire_each_schedule_once_per_slot(
    through_pgbouncer,
    tenant,
    s3: S3,  # noqa: F811
    processes,
    tmp_path,
):
    # Each beat asks for a sweep three times a second; each schedule's slots are a second apart.
    deployment = _deploy(processes, s3, tenant, tmp_path, {"KEEPER_SCHEDULE_INTERVAL": "0.3"})
    body = {"workflow": "test.flaky", "input": {"fail_times": 0}, "interval_seconds": 1, "overlap": "queue"}
    schedule_ids = [
        deployment.api("POST", "/api/v1/schedules/", body)["schedule_id"] for _ in range(SCHEDULES)
    ]
    wait_until(
        lambda: (
            min(WorkflowSchedule.objects.filter(pk__in=schedule_ids).values_list("fired_count", flat=True))
            >= SLOTS
        ),
        timeout=60,
        message=f"{SLOTS} slots of every schedule to fire",
    )
    for schedule_id in schedule_ids:  # a pause waits for a sweep that holds the row: nothing fires after
        deployment.api("PATCH", f"/api/v1/schedules/{schedule_id}/", {"enabled": False})
    assert all(h.beat.poll() is None for h in deployment.hosts)  # both beats ran all along

    for schedule_id in schedule_ids:
        schedule = WorkflowSchedule.objects.get(pk=schedule_id)
        # Every run the schedule started, found by who started it, not by the key meant to make it unique.
        keys = list(
            AgentRun.objects.filter(
                events__event_type="run_started", events__actor=f"schedule:{schedule_id}"
            ).values_list("idempotency_key", flat=True)
        )
        per_slot = Counter(_slot(k) for k in keys)
        assert len(per_slot) >= SLOTS, per_slot
        assert set(per_slot.values()) == {1}, per_slot  # once per slot
        assert len(keys) == schedule.fired_count, (schedule.fired_count, per_slot)
        assert max(per_slot) == f"{schedule.last_slot:%Y-%m-%dT%H:%M:%SZ}"


@dataclass
class Receiver:
    """A webhook endpoint that counts POSTs per event id, each answered after `delay` seconds (so
    the two hosts' sweeps overlap while a delivery is in flight)."""

    delay: float = 0.3
    per_event: Counter[str] = field(default_factory=Counter)
    run_ids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with receiver.lock:
                    receiver.per_event[self.headers["Keeper-Event-Id"]] += 1
                    receiver.run_ids.add(body["run_id"])
                time.sleep(receiver.delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    try:
        yield running
    finally:
        running.stop()


RUNS = 8


def test_each_webhook_event_is_delivered_once_with_two_hosts_sweeping(
    through_pgbouncer,
    tenant,
    s3: S3,  # noqa: F811
    processes,
    tmp_path,
    receiver: Receiver,
):
    deployment = _deploy(processes, s3, tenant, tmp_path)
    deployment.api("POST", "/api/v1/webhooks/", {"url": receiver.url, "event_types": ["run.completed"]})
    run_ids = {
        deployment.api("POST", "/api/v1/runs/", {"workflow": "demo.countdown", "input": {"n": 1}})["run_id"]
        for _ in range(RUNS)
    }
    wait_until(
        lambda: WebhookDelivery.objects.filter(status="delivered").count() == RUNS,
        timeout=60,
        message="every run's completion to be delivered",
    )
    time.sleep(3)  # a dozen more sweeps of the two beats: time for a second delivery to arrive
    deliveries = list(WebhookDelivery.objects.all())
    assert len(deliveries) == RUNS and {str(d.run_id) for d in deliveries} == run_ids
    with receiver.lock:
        assert receiver.per_event == {str(d.event_id): 1 for d in deliveries}, receiver.per_event
        assert receiver.run_ids == run_ids
    assert [(d.status, d.attempts) for d in deliveries] == [("delivered", 1)] * RUNS
