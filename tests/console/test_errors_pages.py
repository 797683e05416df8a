"""The 403, 404 and 500 pages keep the navigation and say why and where to go; /favicon.ico is
served; a 403 is logged as one WARNING line without a traceback, and the beat's routine sweeps log
at DEBUG unless they did something."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import RequestFactory

from console.views.errors import server_error
from tests.console.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_a_403_names_the_missing_role_and_keeps_the_navigation(as_role):
    response = as_role("support").get("/runs/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "This needs the engineer role" in page
    assert 'href="/support/">Support inbox</a>' in page  # the navigation is still there
    assert "signed in as <strong>support</strong> with the role support" in page
    assert 'href="/sign-in/?next=/runs/"' in page


def test_a_404_says_what_was_not_found_and_where_to_go(as_role):
    client = as_role("engineer")
    response = client.get(f"/runs/{uuid.uuid4()}/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "No such run" in page and 'href="/runs/">Runs</a>' in page
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "There is no page at <code>/no-such-page/</code>" in response.content.decode()


def test_the_500_page_keeps_the_navigation(role_users):
    request = RequestFactory().get("/runs/")
    request.user = role_users["engineer"]
    response = server_error(request)
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong on the server" in page and 'href="/runs/">Runs</a>' in page


def test_the_favicon_is_served_locally(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].endswith("console/favicon.svg")
    assert finders.find("console/favicon.svg") is not None
    client.post("/sign-in/", {"username": "x", "password": PASSWORD})
    assert "console/favicon.svg" in client.get("/sign-in/").content.decode()


def test_a_403_is_one_warning_line_without_a_traceback(as_role, caplog):
    client = as_role("support")
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert client.get("/runs/").status_code == 403
    lines = [r for r in caplog.records if r.name == "django.request"]
    assert len(lines) == 1
    assert (
        lines[0].levelno == logging.WARNING
        and lines[0].getMessage() == "Forbidden (Permission denied): /runs/"
    )
    assert lines[0].exc_info is None


def _success(task: str, returned: str) -> None:
    logging.getLogger("celery.app.trace").info(
        "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s",
        {"id": "x", "name": task, "return_value": returned, "runtime": 0.01, "args": "()", "kwargs": "{}"},
    )


def test_sweeps_that_did_nothing_log_at_debug(caplog):
    with caplog.at_level(logging.INFO):
        logging.getLogger("celery.worker.strategy").info(
            "Task %(name)s[%(id)s] received", {"id": "x", "name": "workers.tasks.redispatch_runs"}
        )
        logging.getLogger("celery.beat").info(
            "Scheduler: Sending due task %s (%s)", "redispatch-runs", "workers.tasks.redispatch_runs"
        )
        _success("workers.tasks.redispatch_runs", "0")
        _success("workers.tasks.expire_forks", "2")  # did something: kept
        _success("workers.tasks.advance_run", "None")  # not a sweep: kept
    assert [r.getMessage() for r in caplog.records] == [
        "Task workers.tasks.expire_forks[x] succeeded in 0.01s: 2",
        "Task workers.tasks.advance_run[x] succeeded in 0.01s: None",
    ]
    with caplog.at_level(logging.DEBUG):
        _success("workers.tasks.redispatch_runs", "0")
    assert caplog.records[-1].levelname == "DEBUG"


def test_every_beat_task_is_a_quiet_sweep():
    from workers.schedule import beat_schedule

    assert {entry["task"] for entry in beat_schedule().values()} <= set(settings.SWEEP_TASKS)


@pytest.mark.slow
def test_a_real_worker_logs_idle_sweeps_at_debug_only(processes, tmp_path):
    """A real worker and beat, the sweeps every 0.5 s: at DEBUG their lines are there (so they ran),
    and none of them is an INFO line; beat's "sending due task" lines are DEBUG as well."""
    from core.processes import celery_beat_args, celery_worker_args
    from tests.processes import wait_until

    env = {"KEEPER_LOG_LEVEL": "DEBUG", "KEEPER_LOG_FORMAT": "plain", "KEEPER_REDISPATCH_INTERVAL": "0.5"}
    processes.script(celery_worker_args("quiet", loglevel="debug", pool="solo"), env)
    processes.script(celery_beat_args(tmp_path / "beat-schedule", loglevel="debug"), env)
    worker_log, beat_log = tmp_path / "script-0.log", tmp_path / "script-1.log"

    def sweep_lines(path, level: str) -> list[str]:
        text = path.read_text(errors="replace") if path.exists() else ""
        return [
            line
            for line in text.splitlines()
            if "workers.tasks.redispatch_runs" in line and f" {level} " in line
        ]

    wait_until(
        lambda: len([line for line in sweep_lines(worker_log, "DEBUG") if "succeeded" in line]) >= 2,
        timeout=90,
        interval=0.5,
        message="two idle sweeps logged at DEBUG",
    )
    assert sweep_lines(worker_log, "INFO") == []
    assert sweep_lines(beat_log, "DEBUG") and sweep_lines(beat_log, "INFO") == []


@pytest.mark.parametrize("debug", [False, True])  # make run serves with DEBUG on: no 404 handler runs
def test_a_console_address_with_an_upper_case_id_goes_to_its_page(as_role, tenant, settings, debug):
    """An id copied in upper case (another system's tools, a log) names the same run: GET is sent to
    the lower-case address with its query (an unknown id too: its page is the 404); a POST or an
    address that names no page stays a 404."""
    from runs.engine.runs import run_start

    settings.DEBUG = debug
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    client = as_role("engineer")
    upper = str(run.run_id).upper()
    response = client.get(f"/runs/{upper}/?tab=events")
    assert response.status_code == 301
    assert response["Location"] == f"/runs/{run.run_id}/?tab=events"
    assert client.get(response["Location"]).status_code == 200
    assert client.head(f"/runs/{upper}/").status_code == 301
    assert client.post(f"/runs/{upper}/").status_code == 404
    unknown = uuid.uuid4()
    response = client.get(f"/runs/{str(unknown).upper()}/")  # no such run: its address, then the 404
    assert response.status_code == 301 and client.get(response["Location"]).status_code == 404
    assert client.get(f"/no-such-page/{upper}/").status_code == 404
    # Never a redirect off the site, whatever the path holds.
    response = client.get(f"/runs/{upper}//example.com/")
    assert response.status_code == 404
