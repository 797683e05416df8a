"""Merging a branch back: a fork's workspace merged three-way into its parent (or a sibling) against
their common fork point, conflicts listed and resolved, the state merged by the workflow's rule."""

from __future__ import annotations

import pytest

import tests.runs.merge_flows  # noqa: F401 - registers test.merge in this process
from core.errors import ApplicationError
from runs.engine.forks import run_fork
from runs.engine.merge_rules import MergePick
from runs.engine.merge_three_way import Hunk, merge_lines, split_lines
from runs.engine.merges import merge_resolve, run_merge
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import workspace_files_at
from runs.engine.workspace_models import WorkspaceMerge, WorkspaceSnapshot
from runs.kernel.models import AgentEvent, AgentRun
from tests.artifacts import blob_bytes

PLAN = "# plan\nstep one\nstep two\nstep three\n"


def _drive(run_id, *, until=None) -> AgentRun:
    for _ in range(20):
        result = run_advance(run_id=run_id)
        run = AgentRun.objects.get(run_id=run_id)
        if until is not None and until(run):
            return run
        if result.status != "running":
            return run
    raise AssertionError("the run did not stop")


def _tree(
    tenant,
    *,
    main: dict,
    branch: dict,
    files: dict | None = None,
    workflow: str = "test.merge",
    subject: str = "",
    **extra,
):
    """A parent that drafted `files` and a fork of it at its review, each revised and waiting at hold."""
    state = {
        "topic": "t",
        "files": files or {"plan.md": PLAN},
        "main_edits": main,
        "branch_edits": branch,
        **extra,
    }
    parent = run_start(tenant=tenant, workflow_name=workflow, input=state, actor="t", subject=subject).run
    parent = _drive(parent.run_id)
    assert (parent.status, parent.next_step) == ("suspended", "review"), parent.suspend_reason
    child = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="t")
    child = _drive(child.run_id)
    assert (child.status, child.suspend_reason) == ("suspended", "waiting_for_merge")
    run_resume(run_id=parent.run_id, actor="t")
    parent = _drive(parent.run_id)
    assert (parent.status, parent.suspend_reason) == ("suspended", "waiting_for_merge")
    return parent, child


def _files(tenant, run_id) -> dict[str, bytes]:
    _, files = workspace_files_at(run_id=run_id)
    return {path: blob_bytes(tenant.tenant_id, ref) for path, ref in files.items()}


def test_the_line_merge_takes_each_sides_own_changes_and_keeps_overlaps_as_hunks():
    base = split_lines("a\nb\nc\nd\ne\n")
    ours = split_lines("A\nb\nc\nd\ne\n")
    theirs = split_lines("a\nb\nc\nd\nE\n")
    assert merge_lines(base, ours, theirs) == [("A\n",), ("b\n", "c\n", "d\n"), ("E\n",)]
    clash = merge_lines(base, split_lines("a\nB1\nc\nd\ne\n"), split_lines("a\nB2\nc\nd\ne\n"))
    assert clash[1] == Hunk(("b\n",), ("B1\n",), ("B2\n",))
    same = merge_lines(base, split_lines("a\nX\nc\nd\ne\n"), split_lines("a\nX\nc\nd\ne\n"))
    assert "".join(line for piece in same for line in piece) == "a\nX\nc\nd\ne\n"


@pytest.mark.django_db(transaction=True)
def test_a_clean_merge_is_a_new_revision_of_the_parents_workspace_with_its_own_event(tenant):
    files = {"plan.md": PLAN, "old.md": "to delete\n", "keep.md": "kept\n"}
    main = {"files": {"plan.md": PLAN.replace("step three", "step THREE (main)")}}
    branch = {
        "files": {
            "plan.md": PLAN.replace("step one", "step ONE (branch)"),
            "branch.md": "new\n",
            "old.md": None,
        }
    }
    parent, child = _tree(tenant, main=main, branch=branch, files=files)

    merge = run_merge(run_id=child.run_id, actor="t")

    assert merge.status == "applied" and merge.target_id == parent.run_id
    assert (merge.base_run_id, merge.base_seq) == (parent.run_id, child.fork_seq)
    assert merge.taken == {"plan.md": "merged", "branch.md": "theirs", "old.md": "theirs"}
    event = AgentEvent.objects.get(run_id=parent.run_id, seq=merge.result_seq)
    assert event.event_type == "workspace_merged"
    assert event.payload["source_run_id"] == str(child.run_id)
    assert event.payload["base"] == {"run_id": str(parent.run_id), "seq": child.fork_seq}
    assert event.payload["taken"] == merge.taken
    snap = WorkspaceSnapshot.objects.get(run_id=parent.run_id, seq=merge.result_seq)
    assert snap.reason == "merge"
    merged = _files(tenant, parent.run_id)
    assert merged["plan.md"] == b"# plan\nstep ONE (branch)\nstep two\nstep THREE (main)\n"
    assert merged["branch.md"] == b"new\n" and "old.md" not in merged and merged["keep.md"] == b"kept\n"
    # The parent's own next step reads the merged files (a worker loads the new revision).
    run_resume(run_id=parent.run_id, actor="t")
    done = _drive(parent.run_id)
    assert done.status == "completed", done.suspend_reason
    assert bytes.fromhex(done.result["files"]["plan.md"]) == merged["plan.md"]


@pytest.mark.django_db(transaction=True)
def test_a_sibling_merges_against_the_fork_point_both_share(tenant):
    parent = run_start(
        tenant=tenant,
        workflow_name="test.merge",
        actor="t",
        input={"topic": "s", "files": {"plan.md": PLAN}, "branch_edits": {}},
    ).run
    parent = _drive(parent.run_id)
    first = _drive(run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="t").run_id)
    second = _drive(run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="t").run_id)
    merge = run_merge(run_id=second.run_id, into_run_id=first.run_id, actor="t")
    assert (merge.base_run_id, merge.base_seq, merge.status) == (
        parent.run_id,
        parent.state_revision,
        "applied",
    )
    with pytest.raises(ApplicationError) as refused:
        run_merge(run_id=parent.run_id, into_run_id=parent.run_id, actor="t")
    assert refused.value.code == "merge_into_itself"


@pytest.mark.django_db(transaction=True)
def test_conflicts_are_listed_with_base_ours_and_theirs_and_a_person_resolves_them(tenant):
    files = {"plan.md": PLAN, "logo.bin": "hex:00ff00"}
    main = {"files": {"plan.md": PLAN.replace("step two", "step two, main's way"), "logo.bin": "hex:00aa00"}}
    branch = {
        "files": {"plan.md": PLAN.replace("step two", "step two, the branch's way"), "logo.bin": "hex:00bb00"}
    }
    parent, child = _tree(tenant, main=main, branch=branch, files=files)
    before = _files(tenant, parent.run_id)

    merge = run_merge(run_id=child.run_id, actor="t")

    assert merge.status == "conflicts"
    by_id = {c["id"]: c for c in merge.conflicts}
    assert by_id["plan.md#0"] == {
        "id": "plan.md#0",
        "path": "plan.md",
        "kind": "text",
        "base": "step two\n",
        "ours": "step two, main's way\n",
        "theirs": "step two, the branch's way\n",
    }
    assert by_id["logo.bin#0"]["kind"] == "binary"
    assert _files(tenant, parent.run_id) == before  # nothing taken while conflicts are open
    conflicted = AgentEvent.objects.filter(
        run_id=parent.run_id, event_type="workspace_merge_conflicted"
    ).get()
    assert [c["id"] for c in conflicted.payload["conflicts"]] == ["logo.bin#0", "plan.md#0"]
    with pytest.raises(ApplicationError) as binary_edit:
        merge_resolve(
            tenant_id=tenant.tenant_id,
            merge_id=merge.merge_id,
            actor="t",
            picks={"plan.md#0": MergePick.ours(), "logo.bin#0": MergePick.edited("x")},
        )
    assert binary_edit.value.code == "merge_binary_edited"
    with pytest.raises(ApplicationError) as missing:
        merge_resolve(
            tenant_id=tenant.tenant_id,
            merge_id=merge.merge_id,
            actor="t",
            picks={"plan.md#0": MergePick.ours()},
        )
    assert missing.value.code == "merge_unresolved"

    done = merge_resolve(
        tenant_id=tenant.tenant_id,
        merge_id=merge.merge_id,
        actor="person",
        picks={"plan.md#0": MergePick.edited("step two, both ways"), "logo.bin#0": MergePick.theirs()},
    )

    assert done.status == "applied" and done.resolved_by == "person" and done.conflicts == []
    merged = _files(tenant, parent.run_id)
    assert merged["plan.md"] == b"# plan\nstep one\nstep two, both ways\nstep three\n"
    assert merged["logo.bin"] == bytes.fromhex("00bb00")
    event = AgentEvent.objects.get(run_id=parent.run_id, seq=done.result_seq)
    assert event.event_type == "workspace_merged" and event.payload["resolved_by"] == "person"
    assert event.payload["taken"] == {"plan.md": "resolved", "logo.bin": "resolved"}


@pytest.mark.django_db(transaction=True)
def test_a_running_target_waits_suspended_while_its_conflicts_are_open_then_resumes(tenant):
    main = {"files": {"plan.md": PLAN.replace("step one", "main")}}
    branch = {"files": {"plan.md": PLAN.replace("step one", "branch")}}
    state = {"topic": "live", "files": {"plan.md": PLAN}, "main_edits": main, "branch_edits": branch}
    parent = _drive(run_start(tenant=tenant, workflow_name="test.merge", input=state, actor="t").run.run_id)
    child = _drive(run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="t").run_id)
    run_resume(run_id=parent.run_id, actor="t")
    parent = _drive(parent.run_id, until=lambda r: r.status == "running" and r.next_step == "hold")
    assert parent.lease_owner is None

    merge = run_merge(run_id=child.run_id, actor="t")

    parent.refresh_from_db()
    assert merge.status == "conflicts"
    assert (parent.status, parent.suspend_reason) == ("suspended", "merge_conflicts")
    assert str(merge.merge_id) in parent.suspend_detail
    assert run_advance(run_id=parent.run_id).outcome == "not_acquired"  # it waits: nobody resumes it
    merge_resolve(
        tenant_id=tenant.tenant_id,
        merge_id=merge.merge_id,
        actor="p",
        picks={"plan.md#0": MergePick.theirs()},
    )
    parent.refresh_from_db()
    assert parent.resume_requested_at is not None and parent.resume_requested_by == "p"
    parent = _drive(parent.run_id)
    assert AgentEvent.objects.filter(run_id=parent.run_id, event_type="resume_verified").exists()
    # The branch had passed its hold (held: True) and only it changed that key: the default rule took
    # it, so the parent's hold step completes with the merged files.
    assert WorkspaceMerge.objects.get(merge_id=merge.merge_id).state_taken == {"theirs": ["held"]}
    assert parent.status == "completed", parent.suspend_reason
    assert bytes.fromhex(parent.result["files"]["plan.md"]) == PLAN.replace("step one", "branch").encode()


@pytest.mark.django_db(transaction=True)
def test_the_default_refuses_state_both_sides_changed_and_a_declared_rule_merges_it(tenant):
    parent, child = _tree(tenant, main={"choice": "main"}, branch={"choice": "branch"})
    revision = AgentRun.objects.get(run_id=parent.run_id).state_revision
    with pytest.raises(ApplicationError) as refused:
        run_merge(run_id=child.run_id, actor="t")
    assert (refused.value.http_status, refused.value.code) == (409, "state_merge_refused")
    assert refused.value.details == {"keys": ["choice"]}
    assert AgentRun.objects.get(run_id=parent.run_id).state_revision == revision  # nothing written
    assert not WorkspaceMerge.objects.exists()

    main = {"choice": "main", "files": {"auto/gen.txt": "main\n", "plan.md": "main\n"}}
    branch = {"choice": "branch", "files": {"auto/gen.txt": "branch\n", "plan.md": "branch\n"}}
    files = {"plan.md": PLAN, "auto/gen.txt": "gen\n"}
    parent, child = _tree(tenant, main=main, branch=branch, files=files, workflow="test.merge_ruled")
    merge = run_merge(run_id=child.run_id, actor="t")
    # The rule kept the target's choice; the resolver answered auto/ only, so a person gets both.
    assert merge.status == "conflicts" and {c["path"] for c in merge.conflicts} == {"auto/gen.txt", "plan.md"}
    assert merge.state_taken["rule"] == "target_wins"


@pytest.mark.django_db(transaction=True)
def test_the_workflows_resolver_settles_conflicts_it_answers(tenant):
    main = {"files": {"auto/gen.txt": "main\n"}}
    branch = {"files": {"auto/gen.txt": "branch\n"}}
    parent, child = _tree(
        tenant, main=main, branch=branch, files={"auto/gen.txt": "gen\n"}, workflow="test.merge_ruled"
    )
    merge = run_merge(run_id=child.run_id, actor="t")
    assert merge.status == "applied" and merge.resolved_by == "workflow:test.merge_ruled"
    assert _files(tenant, parent.run_id)["auto/gen.txt"] == b"branch\n"
