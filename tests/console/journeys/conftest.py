"""The journeys: each role's whole job in a real browser, on the demo `make run` loads.

One web server (gunicorn, as `make run` starts it, serving the console and the payments sandbox) and
one Celery worker per test module and width, on the data `manage.py keeper_demo` loads into the test
database; the people sign in with the demo's printed credentials. Every page a person opens is
checked as they go: no console error in the browser, no 4xx/5xx answer to a click (a step that
expects one says so), and nothing wider than the window.

The data lives through a module (its tests are steps of one role's job, each on its own part of the
demo), so these tests use no database fixture of pytest-django: the module loads the demo with the
database unblocked and flushes it when it is done, as a transactional test does after itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from django.core.management import call_command
from django.db import connections
from django.test.utils import override_settings

from core.processes import ROOT, current_database_url, stop_groups
from core.tenancy import tenant_scope
from tests.console.conftest import ARTIFACTS
from tests.processes import ProcessGroup, flush_redis, free_port, wait_until, web_serve

WIDTHS = {"laptop": 1366, "phone": 390}
HEIGHT = 860
# Where a journey saves the screens people see (KEEPER_JOURNEY_SHOTS names another folder).
SHOTS = Path(os.environ.get("KEEPER_JOURNEY_SHOTS") or ARTIFACTS / "journeys")

# What makes a page wider than its window, measured in the page ([] when it fits): the document
# scrolls sideways, or an element sticks out of the window without a scrolling box around it.
WIDER_THAN_THE_WINDOW = """() => {
  const vw = document.documentElement.clientWidth, problems = [];
  if (document.documentElement.scrollWidth > vw + 1) {
    problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
  }
  const scrolls = (el) => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (["auto", "scroll", "hidden"].includes(s.overflowX) || s.display === "none") return true;
    }
    return false;
  };
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if ((r.right > vw + 1 || r.left < -1) && !scrolls(el)) {
      problems.push(`wider than the window: ${el.tagName.toLowerCase()} "${el.innerText.trim().slice(0, 40)}"`);
    }
  }
  return problems.slice(0, 10);
}"""


@dataclass
class Demo:
    """The demo as `make run` printed it: the server's address, the sign-ins and the runs by name."""

    base_url: str
    width: int
    label: str
    runs: dict[str, str]
    credentials: dict[str, str]
    folder: Path
    blocker: Any
    worker: ProcessGroup

    @contextlib.contextmanager
    def db(self, tenant_id: UUID | None = None) -> Iterator[None]:
        """The test database for a check of what a click did (row-level security: as `tenant_id`)."""
        with self.blocker.unblock():
            try:
                if tenant_id is None:
                    yield
                else:
                    with tenant_scope(tenant_id):
                        yield
            finally:
                _closed()

    def tenant_id(self, slug: str) -> UUID:
        from core.models import Tenant

        with self.db():
            return Tenant.objects.get(slug=slug).tenant_id

    def logs(self) -> str:
        return self.worker.logs()


def _flush() -> None:
    """What a transactional test does after itself: every table emptied (and Redis)."""
    call_command("flush", verbosity=0, interactive=False, database="default", reset_sequences=False)
    flush_redis()
    _closed()


def _closed() -> None:
    """Close this context's database connection. While Playwright's event loop runs in this thread,
    Django's connections are those of another context, which nothing else would ever close (and the
    test database could not be dropped at the end)."""
    connections.close_all()


@pytest.fixture(scope="session")
def journey_server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """The web server of every journey (the test database's URL is read once it exists)."""
    folder = tmp_path_factory.mktemp("journey-web")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with django_db_blocker.unblock():
        web, base = web_serve(
            folder / "web.log",
            port=port,
            env={"KEEPER_SANDBOX_URL": f"{base}/sandbox", "KEEPER_PAYMENTS_TIMEOUT": "2"},
        )
    try:
        yield base
    finally:
        stop_groups([web], grace=5)
        with django_db_blocker.unblock():
            _wait_for_no_other_session()


def _wait_for_no_other_session() -> None:
    """The server's and the workers' database sessions gone (a killed process's session ends a moment
    after it), so the test database can be dropped at the end. Their processes are stopped by now: a
    session of the test's role left idle is no one's (a pooler's server connection kept from an
    earlier test of this process, say) and is ended."""
    from django.db import connection

    def alone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, state = 'idle' AND pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND usename = current_user"
            )
            rows = cursor.fetchall()
        return all(ended for _, ended in rows)

    wait_until(alone, timeout=20, interval=0.2, message="the journeys' processes to leave the database")
    connection.close()


@pytest.fixture(scope="module", params=list(WIDTHS.values()), ids=list(WIDTHS))
def demo(request, journey_server, django_db_blocker, tmp_path_factory) -> Iterator[Demo]:
    """The demo loaded by its management command (as `make run` does once web answers), and a worker."""
    folder = tmp_path_factory.mktemp(f"journey-{request.module.__name__.rsplit('.', 1)[-1]}")
    sandbox = f"{journey_server}/sandbox"
    overrides = override_settings(
        DATA_DIR=folder, DEBUG=True, KEEPER_SANDBOX_URL=sandbox, KEEPER_PAYMENTS_TIMEOUT=2.0
    )
    group = ProcessGroup(folder)
    with django_db_blocker.unblock():
        _flush()
        database = current_database_url()
        _closed()
    # As `make run` does once web answers: the command in its own process (the test settings have
    # DEBUG off, which the command refuses without being told).
    loaded = subprocess.run(
        [sys.executable, "manage.py", "keeper_demo", "--force-production"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": database,
            "KEEPER_DATA_DIR": str(folder),
            "KEEPER_SANDBOX_URL": sandbox,
            "KEEPER_PAYMENTS_TIMEOUT": "2",
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert loaded.returncode == 0, f"the demo did not load:\n{loaded.stdout}\n{loaded.stderr}"
    credentials = dict(
        line.split(" ", 1) for line in (folder / "demo-credentials.txt").read_text().splitlines() if line
    )
    runs = json.loads((folder / "demo-loaded.txt").read_text())
    group.worker(env={"KEEPER_SANDBOX_URL": sandbox, "KEEPER_PAYMENTS_TIMEOUT": "2"})
    width = request.param
    try:
        with overrides:
            yield Demo(
                base_url=journey_server,
                width=width,
                label=next(k for k, v in WIDTHS.items() if v == width),
                runs=runs,
                credentials=credentials,
                folder=folder,
                blocker=django_db_blocker,
                worker=group,
            )
    finally:
        group.kill_all()
        with django_db_blocker.unblock():
            _flush()


class JourneyProblem(AssertionError):
    pass


@dataclass
class Person:
    """One person at their browser: every page they reach is checked as they go."""

    page: Any
    demo: Demo
    name: str
    errors: list[str] = field(default_factory=list)
    bad_answers: list[str] = field(default_factory=list)
    expected: set[int] = field(default_factory=set)

    # --- going places -------------------------------------------------------------------------

    def visit(self, path: str) -> Any:
        self.page.goto(path)
        return self.settled()

    def click(self, target: Any, **kwargs: Any) -> Any:
        """Click a locator, or the button/link of that name (a navigation is waited for)."""
        locator = target if not isinstance(target, str) else self._named(target, **kwargs)
        locator.click()
        return self.settled()

    def _named(self, name: str, *, exact: bool = False, within: Any = None) -> Any:
        scope = within if within is not None else self.page.locator("main")
        found = scope.get_by_role("button", name=name, exact=exact).or_(
            scope.get_by_role("link", name=name, exact=exact)
        )
        return found.first

    def settled(self) -> Any:
        self.page.wait_for_load_state("load")
        self.check()
        return self.page

    @contextlib.contextmanager
    def expecting(self, *statuses: int) -> Iterator[None]:
        """A step whose answer is meant to be a 4xx (a form sent back with its errors)."""
        self.expected = set(statuses)
        try:
            yield
        finally:
            self.expected = set()

    def check(self) -> None:
        problems = self.page.evaluate(WIDER_THAN_THE_WINDOW)
        found = [*self.errors, *self.bad_answers, *(f"{self.page.url}: {p}" for p in problems)]
        if self.bad_answers:  # what the page told the person, so the failure names its cause
            told = " / ".join(
                t.strip() for t in self.page.locator("main .errorlist, ul.messages").all_inner_texts()
            )
            found += [f"the page says: {told[:500]}"] if told.strip(" /") else []
        self.errors.clear()
        self.bad_answers.clear()
        if found:
            self.shot("problem")
            raise JourneyProblem(f"{self.name} at {self.demo.width} px: " + "; ".join(found))

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.demo.width}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    # --- what the page says -------------------------------------------------------------------

    def text(self, selector: str = "main") -> str:
        return str(self.page.locator(selector).first.inner_text())

    def message(self) -> str:
        return self.text("ul.messages")


def _watch(person: Person) -> None:
    page, origin = person.page, person.demo.base_url

    def on_console(message: Any) -> None:
        if message.type != "error":
            return
        # The browser reports every 4xx answer as a console error too: an expected one is not.
        if any(f"status of {status} " in message.text for status in person.expected):
            return
        person.errors.append(f"console error on {page.url}: {message.text}")

    def on_response(response: Any) -> None:
        if not response.url.startswith(origin) or response.status < 400:
            return
        if response.status in person.expected:
            return
        person.bad_answers.append(f"{response.request.method} {response.url} answered {response.status}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: person.errors.append(f"script error on {page.url}: {error}"))
    page.on("response", on_response)


@pytest.fixture
def person(browser, demo) -> Iterator[Callable[[str], Person]]:
    """person("acme-support") -> that demo user signed in through the sign-in form at the module's
    width; their pages are checked as they go, and once more at the end of the test."""
    opened: list[tuple[Any, Person]] = []

    def sign_in(username: str) -> Person:
        context = browser.new_context(
            base_url=demo.base_url, viewport={"width": demo.width, "height": HEIGHT}, accept_downloads=True
        )
        page = context.new_page()
        page.set_default_timeout(20_000)
        who = Person(page=page, demo=demo, name=username)
        opened.append((context, who))
        _watch(who)
        who.visit("/sign-in/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", demo.credentials[username])
        who.click(page.locator("button[type=submit]"))
        assert "/sign-in/" not in page.url, f"{username} could not sign in"
        return who

    yield sign_in
    try:
        for _, who in opened:
            who.check()
    finally:
        for context, _ in opened:
            context.close()


def eventually(predicate: Callable[[], bool], demo: Demo, what: str, timeout: float = 60) -> None:
    """Wait for the worker's part (the journey goes on once it is done)."""
    wait_until(predicate, timeout=timeout, interval=0.3, message=f"{what}\n{demo.logs()}")


UUID_IN_PATH = re.compile(r"/([0-9a-f-]{36})/")
