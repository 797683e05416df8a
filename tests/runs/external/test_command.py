"""manage.py workflow_register_external: registers once, says so again, and refuses bad input with a message."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from runs.engine.runs import run_start
from runs.external.models import ExternalWorkflow

pytestmark = pytest.mark.django_db


def _call(*args: str) -> str:
    out = io.StringIO()
    call_command("workflow_register_external", *args, stdout=out)
    return out.getvalue()


def test_the_command_registers_an_external_workflow_runs_can_start(tenant):
    args = (
        "ext.cli",
        "1",
        "--tenant",
        "acme",
        "--steps",
        "a,b",
        "--tool",
        "crm.update=v1",
        "--input-schema",
        '{"type": "object", "required": ["who"]}',
    )
    assert "ext.cli 1 registered for tenant acme: steps a, b" in _call(*args)
    assert "already registered" in _call(*args)
    row = ExternalWorkflow.objects.get(name="ext.cli")
    assert (row.steps, row.tools, row.created_by) == (
        ["a", "b"],
        [{"name": "crm.update", "version": "v1"}],
        "cli",
    )
    run = run_start(tenant=tenant, workflow_name="ext.cli", input={"who": "x"}, actor="t").run
    assert (run.next_step, run.workflow_version) == ("a", "1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("ext.cli", "1", "--tenant", "acme", "--steps", "a", "--tool", "nover"),
            "--tool takes NAME=VERSION",
        ),
        (
            ("ext.cli", "1", "--tenant", "acme", "--steps", "a", "--input-schema", "{"),
            "--input-schema is not JSON",
        ),
        (("refund", "9", "--tenant", "acme", "--steps", "a"), "invalid_name"),
        (("ext.cli", "1", "--tenant", "nope", "--steps", "a"), "unknown_tenant"),
    ],
)
def test_the_command_refuses_bad_input_with_a_message(tenant, args, message):
    with pytest.raises(CommandError, match=message):
        _call(*args)
    assert not ExternalWorkflow.objects.exists()
