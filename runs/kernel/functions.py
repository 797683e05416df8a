"""The PL/pgSQL the kernel keeps in the database, from its one current source: runs/kernel/_sql/functions/.

Functions that must stay one round trip (a LangGraph checkpoint, the sweep's claims across tenants)
and the two triggers on the run tables that write nothing of a run (closing its approvals, counting an
event's rewrites). Migration 0033 installs them and every `migrate` installs them again afterwards
(post_migrate), so the database always runs what these files say, whatever migration last touched them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import connections

from runs.kernel._sql import partitions, runs

FUNCTIONS = Path(__file__).parent / "_sql" / "functions"


def function_sources() -> dict[str, str]:
    """Each function's name and its current CREATE OR REPLACE statement: the files, and the functions
    made from the move statements themselves (the step commit)."""
    sources = {path.stem: path.read_text() for path in sorted(FUNCTIONS.glob("*.sql"))}
    sources[runs.COMMIT_FUNCTION.name] = runs.COMMIT_FUNCTION.source
    return sources


def functions_install(*, using: str) -> None:
    with connections[using].cursor() as cursor:
        for sql in function_sources().values():
            cursor.execute(sql)


def functions_install_after_migrate(*, using: str, plan: Any = None, **_: Any) -> None:
    """post_migrate after `migrate` (a flush sends it too, with no plan): the current sources over
    whatever the migrations created, as the role that ran them."""
    if plan is not None:
        functions_install(using=using)


def partitions_ensure(*, using: str, table: str, months_ahead: int) -> list[str]:
    """The table's monthly partitions up to `months_ahead` past now, on the `using` connection (a
    migration's role, before the application's connection reaches the database); the ones made."""
    with connections[using].cursor() as cursor:
        cursor.execute(partitions.ENSURE, {"table": table, "since": None, "ahead": months_ahead})
        return [row[0] for row in cursor.fetchall()]
