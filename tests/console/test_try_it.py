"""The README's "try it" commands, as written, start runs the printed demo sign-ins can see (they
used to start them in tenant `demo`, which no demo user belongs to)."""

from __future__ import annotations

import io
import shlex

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from console.demo import demo_load
from core.processes import ROOT
from core.services import keeper_setup

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def readme_start_run_commands() -> list[list[str]]:
    """The `manage.py start_run ...` lines of README's "Try it" part, as argument lists."""
    text = (ROOT / "README.md").read_text()
    part = text.split("Try it", 1)[1].split("\n## ", 1)[0]
    commands = []
    for line in part.splitlines():
        if "manage.py start_run" in line:
            words = shlex.split(line)
            commands.append(words[words.index("manage.py") + 1 :])
    return commands


def test_the_readme_try_it_runs_show_on_the_demo_engineers_run_list(live_server, settings, tmp_path, client):
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    keeper_setup(data_dir=tmp_path)  # as `make run` does: the tenant `demo` and `admin`
    demo_load(data_dir=tmp_path)
    commands = readme_start_run_commands()
    assert [c[:2] for c in commands] == [["start_run", "demo.countdown"], ["start_run", "refund"]]
    started = []
    for command in commands:
        out = io.StringIO()
        call_command(*command, stdout=out)
        started.append(out.getvalue().split()[0])
    for username in ("acme-engineer", "operator"):
        client.force_login(get_user_model().objects.get(username=username))
        page = client.get("/runs/").content.decode()
        for run_id in started:
            assert f'data-run="{run_id}"' in page, (username, run_id)
