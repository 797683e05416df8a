"""First-run set-up and the benchmark command's interface."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from core.models import Tenant
from core.services import keeper_setup
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db


def test_setup_creates_tenant_and_admin_once(tmp_path, settings):
    settings.KEEPER_ADMIN_PASSWORD = ""
    first = keeper_setup(data_dir=tmp_path)
    second = keeper_setup(data_dir=tmp_path)
    assert first.admin_created and not second.admin_created
    password = (tmp_path / "admin-password.txt").read_text().strip()
    assert (tmp_path / "admin-password.txt").stat().st_mode & 0o077 == 0
    assert get_user_model().objects.get(username="admin").check_password(password)
    assert Tenant.objects.filter(slug="demo").count() == 1


# The baselines use their own connections (they must see committed rows); the memory figure builds
# per-tenant indexes through the owner connection.
@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_bench_prints_one_json_object_with_baseline_and_ratio():
    out = io.StringIO()
    # The figures checked here; run_e2e, langgraph_put, pooled_steps and scaling start processes and
    # have tests of their own (tests/bench/).
    checked = [
        "commit_step",
        "context_build",
        "context",
        "memory_search",
        "retrieval_search",
        "console_pages",
    ]
    call_command(
        "bench",
        "--quick",
        "--json",
        *(f"--only={name}" for name in checked),
        stdout=out,
        stderr=io.StringIO(),
    )
    assert sorted(json.loads(out.getvalue())) == sorted(checked)
    figures = json.loads(out.getvalue())["commit_step"]
    assert figures["engine_ops_s"] > 0 and figures["raw_ops_s"] > 0
    assert figures["ratio"] == pytest.approx(figures["engine_ops_s"] / figures["raw_ops_s"], rel=0.01)
    assert figures["p50_ms"] <= figures["p99_ms"]
    context = json.loads(out.getvalue())["context_build"]
    assert context["events"] == 2000 and context["read_ms"] > 0 and context["build_ms"] > 0
    # The ratio comes from the unrounded times; the times are shown to 0.1 ms (each within 0.05).
    build, read = context["build_ms"], context["read_ms"]
    low, high = (build - 0.05) / (read + 0.05), (build + 0.05) / max(read - 0.05, 1e-9)
    assert low - 0.005 <= context["ratio"] <= high + 0.005
    conversation = json.loads(out.getvalue())["context"]
    assert (conversation["small_events"], conversation["large_events"]) == (300, 3000)
    assert conversation["small_build_ms"] > 0 and conversation["large_build_ms"] > 0
    memory = json.loads(out.getvalue())["memory_search"]
    assert memory["items"] >= 3000 and memory["tenants"] == 10 and memory["rls_p50_ms"] > 0
    assert memory["recall_at_10_smallest_tenant"] >= 0.95
    assert "no_rls_p50_ms" in memory  # the embedded test server offers the superuser baseline
    retrieval = json.loads(out.getvalue())["retrieval_search"]
    assert retrieval["chunks"] >= 3000 and retrieval["acl_p50_ms"] > 0 and retrieval["no_acl_p50_ms"] > 0
    assert retrieval["typical_principal_reads"] < retrieval["largest_tenant_chunks"]
    assert retrieval["recall_at_10_typical"] >= 0.95 and retrieval["recall_at_10_rare"] >= 0.95
    assert retrieval["ratio_p50"] == pytest.approx(
        retrieval["acl_p50_ms"] / retrieval["no_acl_p50_ms"], abs=0.01
    )
    pages = json.loads(out.getvalue())["console_pages"]
    assert pages["runs"] >= 2000 and pages["run_page_events"] == 1000
    assert pages["run_list_floor_ms"] > 0 and 0 < pages["run_list_p50_ms"] <= pages["run_list_max_ms"]
    assert 0 < pages["run_page_p50_ms"] <= pages["run_page_max_ms"]
    assert AgentRun.objects.filter(tenant__slug="bench").count() == 0  # cleaned up
    assert not AgentRun.objects.filter(tenant__slug="bench-console").exists()


def test_bench_prints_readable_figures_for_the_chosen_benchmark_and_refuses_unknown_ones():
    from django.core.management.base import CommandError

    out = io.StringIO()
    call_command("bench", "--quick", "--only", "context_build", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("context_build:\n") and "  build_ms: " in out.getvalue()
    assert "commit_step" not in out.getvalue()
    with pytest.raises(CommandError, match="unknown benchmark nope"):
        call_command("bench", "--only", "nope", stdout=io.StringIO(), stderr=io.StringIO())


def test_start_run_command_reports_bad_input_without_a_traceback(tenant):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="invalid_input"):
        call_command("start_run", "demo.countdown", "--tenant", "acme", "--input", '{"n": "x"}')
    with pytest.raises(CommandError, match="not JSON"):
        call_command("start_run", "demo.countdown", "--tenant", "acme", "--input", "{n: 1")
    out = io.StringIO()
    call_command("start_run", "demo.countdown", "--tenant", "acme", "--input", '{"n": 1}', stdout=out)
    assert "started" in out.getvalue() and AgentRun.objects.count() == 1
