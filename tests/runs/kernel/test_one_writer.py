"""Nothing but the kernel writes agent_runs and agent_events: Python (SQL text and the ORM) and the
database's own functions and triggers alike."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.db import connection

from runs.kernel.functions import function_sources

ROOT = Path(__file__).resolve().parents[3]
# The application's code; tests and benchmarks write fixtures and baselines of their own.
PACKAGES = ("config", "core", "console", "memory", "retrieval", "runs", "sandbox", "workers")
KERNEL = ROOT / "runs" / "kernel"
RUN_TABLES = re.compile(
    r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+(public\.)?(agent_runs|agent_events)\b", re.I
)
RUN_MODELS = {"AgentRun", "AgentEvent"}
WRITES = {
    "update",
    "create",
    "bulk_create",
    "bulk_update",
    "delete",
    "get_or_create",
    "update_or_create",
    "save",
}


def _sources() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if KERNEL in path.parents or "migrations" in path.parts:
                continue
            files.append(path)
    return files


def _receiver_models(node: ast.expr) -> set[str]:
    """The run models a chain like AgentRun.objects.filter(...).update names at its root."""
    names = set()
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Attribute) and node.attr == "objects" and isinstance(node.value, ast.Name):
            names.add(node.value.id)
    return names & RUN_MODELS


def _orm_writes(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in WRITES and (models := _receiver_models(node.func.value)):
            found.append(f"{path}:{node.lineno} {'/'.join(sorted(models))}.{node.func.attr}")
    return found


def test_no_code_outside_the_kernel_writes_the_run_tables():
    sql = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in _sources()
        for match in RUN_TABLES.finditer(path.read_text())
    ]
    orm = [write for path in _sources() for write in _orm_writes(path)]
    assert sql == [] and orm == [], "write through runs.kernel.apply(move) instead:\n" + "\n".join(sql + orm)


def test_the_scan_finds_a_write_it_should_refuse(tmp_path):
    """The checks above would see a writer (the scan is not blind)."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from runs.kernel.models import AgentRun\n"
        "def f(run_id):\n"
        "    AgentRun.objects.filter(run_id=run_id).update(status='failed')\n"
        "SQL = 'update agent_events set payload = null'\n"
    )
    assert _orm_writes(planted) and RUN_TABLES.search(planted.read_text())


@pytest.mark.django_db
def test_the_databases_functions_and_triggers_that_touch_the_run_tables_are_the_kernels():
    sources = function_sources()
    kernel = set(sources)
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'public' AND p.prosrc ~* %s""",
            [r"(update|insert\s+into|delete\s+from)\s+(public\.)?agent_(runs|events)\y"],  # \y: a word's end
        )
        writers = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            """SELECT t.tgname, p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                WHERE NOT t.tgisinternal AND t.tgrelid IN ('agent_runs'::regclass, 'agent_events'::regclass)"""
        )
        triggers = dict(cursor.fetchall())
    assert writers and writers <= kernel, (
        f"functions writing the run tables outside the kernel: {writers - kernel}"
    )
    assert set(triggers.values()) <= kernel, f"triggers on the run tables outside the kernel: {triggers}"
    assert "agent_runs_child_finished" not in triggers  # a finished child tells its parent in the move itself
    with connection.cursor() as cursor:
        for name, source in sources.items():  # what the database runs is what the kernel's files say
            cursor.execute("SELECT pg_get_functiondef(%s::regproc)", [name])
            assert re.sub(r"\s+", " ", cursor.fetchone()[0]).strip() in re.sub(r"\s+", " ", source)
