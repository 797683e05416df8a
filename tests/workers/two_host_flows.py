"""The workflow of the two-host test: imported by the test process, and by the hosts' worker and web
processes through KEEPER_WORKFLOW_MODULES=tests.workflows,tests.workers.two_host_flows."""

from __future__ import annotations

import hashlib
import os
import time

from core.artifacts import artifact_get, artifact_put
from runs.authoring import Context, State, StepResult, workflow

# Which "host" a process stands for (each host's processes get their own value).
HOST_VARIABLE = "TWO_HOSTS_HOST"

handover = workflow(
    "test.two_hosts",
    version="1",
    description="Keeps a workspace file and a long tool result, then finishes a write-up from both.",
)


def _host() -> str:
    return os.environ.get(HOST_VARIABLE, "")


@handover.step
def gather(ctx: Context, state: State) -> StepResult:
    ctx.workspace.write("notes/findings.md", f"# {state['topic']}\nfound on host {_host()}\n")
    # A search tool's long answer, kept by digest (the state holds the reference, never the text).
    answer = "".join(f"hit {i}: {state['topic']} policy paragraph {i}\n" for i in range(400))
    kept = artifact_put(tenant_id=ctx.tenant_id, data=answer.encode(), kind="run_state")
    return ctx.next(write_up, {**state, "gathered_on": _host(), "search_result": kept})


@handover.step
def write_up(ctx: Context, state: State) -> StepResult:
    # The host that gathered is killed in this step (it holds the lease, renewed by its heartbeat);
    # any other host goes on at once.
    if _host() == state["gathered_on"]:
        time.sleep(state["hold_s"])
    findings = ctx.workspace.read_text("notes/findings.md")
    answer = artifact_get(tenant_id=ctx.tenant_id, ref=state["search_result"])
    ctx.workspace.write("report.md", findings + answer.decode().splitlines()[0] + "\n")
    return ctx.complete(
        {**state, "finished_on": _host()},
        {
            "findings": findings,
            "search_result": state["search_result"],
            "search_sha256": "sha256:" + hashlib.sha256(answer).hexdigest(),
            "finished_on": _host(),
        },
    )


handover.register()
