"""The console's screenshots for docs/explanation/console-compared.md, taken the way a person sees it.

Keeper is started as `make run` starts it (embedded PostgreSQL and Redis, web, worker and beat, the
demo loaded once web answers), in a folder of its own, and walked in Debian's chromium at 1366 px:
each point of the comparison is tried (a click that does not do what the point says stops the walk)
and its screen saved as a JPEG under docs/images/console/. Not part of the test suite (it takes a few
minutes); the journeys test the same steps. Run it with

    .venv/bin/python -m tests.console.screenshots            # every point, and the support screens
    .venv/bin/python -m tests.console.screenshots --support-only --prefix before \\
        --url http://127.0.0.1:8001 --data-dir /path/to/that/keeper/.data

The second form shoots only the four screens a support agent sees most, on a Keeper already running
(another version's, for a before-and-after), whose data folder holds the demo's sign-ins.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "images" / "console"
WIDTH, HEIGHT = 1366, 900
QUALITY = 70
WAIT = 60_000  # ms: a worker moves a run meanwhile


@dataclass
class Keeper:
    url: str
    folder: Path
    credentials: dict[str, str]
    runs: dict[str, Any]

    @classmethod
    def read(cls, url: str, folder: Path) -> Keeper:
        credentials = dict(
            line.split(" ", 1)
            for line in (folder / "demo-credentials.txt").read_text().splitlines()
            if " " in line
        )
        admin = folder / "admin-password.txt"
        if admin.exists():
            credentials["admin"] = admin.read_text().strip()
        return cls(url, folder, credentials, json.loads((folder / "demo-loaded.txt").read_text()))


def _embedded_env(folder: Path) -> dict[str, str]:
    """This environment, attached to the embedded services under `folder` (as `make run` starts them)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    return {**env, "KEEPER_DATA_DIR": str(folder)}


@contextmanager
def make_run(folder: Path) -> Iterator[Keeper]:
    """`make run` in `folder`: the launcher's own processes, stopped with Ctrl-C's signal at the end."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**_embedded_env(folder), "KEEPER_PORT": str(port), "KEEPER_HOST": "127.0.0.1"}
    log = (folder / "launcher.log").open("w")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "config.launcher", "run"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while "console at http" not in (folder / "launcher.log").read_text():
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"Keeper did not start:\n{(folder / 'launcher.log').read_text()[-3000:]}")
            time.sleep(1)
        yield Keeper.read(f"http://127.0.0.1:{port}", folder)
    finally:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
        log.close()


class Api:
    """Keeper's REST API with a key of the tenant's, made as an operator makes one (manage.py api_key)."""

    def __init__(self, keeper: Keeper, *, tenant: str) -> None:
        made = subprocess.run(
            [sys.executable, "manage.py", "api_key", "create", "--tenant", tenant, "--scope", "write"]
            + ["--name", "screenshots"],
            cwd=ROOT,
            env=_embedded_env(keeper.folder),
            capture_output=True,
            text=True,
            check=True,
        )
        self.url, self.key = keeper.url, made.stdout.strip().splitlines()[-1]

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        import urllib.request

        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read() or b"null")


class Walk:
    """One browser; a person signs in, and each point's screen is saved as it is reached."""

    def __init__(self, browser: Any, keeper: Keeper, out: Path, prefix: str) -> None:
        self.browser, self.keeper, self.out, self.prefix = browser, keeper, out, prefix
        self.saved: list[Path] = []
        self.context: Any = None
        self.page: Any = None

    def sign_in(self, username: str) -> Any:
        if self.context is not None:
            self.context.close()
        self.context = self.browser.new_context(
            base_url=self.keeper.url, viewport={"width": WIDTH, "height": HEIGHT}, accept_downloads=True
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.page.goto("/sign-in/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", self.keeper.credentials[username])
        self.page.locator("button[type=submit]").click()
        self.page.wait_for_load_state("load")
        return self.page

    def go(self, path: str) -> Any:
        self.page.goto(path)
        self.page.wait_for_load_state("load")
        return self.page

    def click(self, locator: Any) -> Any:
        locator.click()
        self.page.wait_for_load_state("load")
        return self.page

    def shot(self, name: str, *targets: Any, full: bool = False, tallest: int = 2400) -> Path:
        """The window (or the whole page, or the box around `targets`) as a JPEG."""
        path = self.out / f"{self.prefix}{name}.jpg"
        options: dict[str, Any] = {"path": str(path), "type": "jpeg", "quality": QUALITY}
        boxes = [t.bounding_box() for t in targets]
        boxes = [b for b in boxes if b]
        if boxes:
            top = max(0, min(b["y"] for b in boxes) - 12)
            bottom = max(b["y"] + b["height"] for b in boxes) + 12
            options["clip"] = {"x": 0, "y": top, "width": WIDTH, "height": min(bottom - top, tallest)}
            options["full_page"] = True
        elif full:
            height = min(self.page.evaluate("document.documentElement.scrollHeight"), tallest)
            options["clip"] = {"x": 0, "y": 0, "width": WIDTH, "height": height}
            options["full_page"] = True
        self.page.screenshot(**options)
        self.saved.append(path)
        print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
        return path


def _row_link(walk: Walk, table: str, text: str, href: str) -> Any:
    """The link of a row that names `text` (by address, so another version's labels do not matter)."""
    return walk.page.locator(f"{table} tr", has_text=text).locator(f'a[href*="{href}"]').first


def support_screens(walk: Walk) -> None:
    """The four screens a support agent sees most, before anything on them is decided."""
    walk.sign_in("acme-support")
    walk.go("/support/")
    walk.shot("support-inbox", full=True)
    walk.click(_row_link(walk, "", "ord-1001", "/support/approvals/"))
    walk.shot("support-approval", full=True)
    walk.go("/support/")
    walk.click(_row_link(walk, "", "ord-1003", "/support/runs/"))
    walk.shot("support-conversation", full=True)
    walk.go("/support/")
    walk.click(_row_link(walk, "", "ord-1002", "/support/operations/"))
    walk.shot("support-reconciliation", full=True)


def points(walk: Walk) -> None:
    """The thirty points of docs/explanation/console-compared.md, in its order, on a fresh demo."""
    from playwright.sync_api import expect

    k = walk.keeper
    # --- support -------------------------------------------------------------------------------
    page = walk.sign_in("acme-support")
    walk.go("/support/")
    walk.click(page.locator("#approvals tr", has_text="ord-1003").get_by_role("link", name="Review"))
    expect(page.locator("#conversation .said.customer").first).to_be_visible()
    walk.shot("01-conversation", page.locator("#conversation"))
    walk.go("/support/")
    walk.click(page.locator("#approvals tr", has_text="credit limit").get_by_role("link", name="Review"))
    expect(page.locator("#request-facts")).not_to_contain_text("Refund")
    walk.shot("02-declared-approval", page.locator("main"))
    walk.go("/support/")
    walk.click(page.locator("#questions tr", has_text="demo-support-2").get_by_role("link", name="Answer"))
    inbox = page.locator("#langgraph-question")
    inbox.locator("details.edit summary").click()
    walk.shot("03-agent-inbox", inbox)
    inbox.locator("input[name='arg:amount_minor']").fill("2000")
    walk.click(inbox.get_by_role("button", name="Send the edit"))
    expect(page.locator("#langgraph-reply")).to_contain_text("20.00 EUR", timeout=WAIT)
    walk.shot("03b-agent-inbox-went-on", page.locator("ul.messages"), page.locator("#langgraph-reply"))
    walk.go("/support/")
    walk.click(page.locator("#operations tr", has_text="ord-1002").get_by_role("link", name="Reconcile"))
    card = page.locator("#lookup-card")
    walk.click(card.get_by_role("button", name="Look up again"))
    expect(card).to_contain_text("Looked up just now")
    page.check("input[name=outcome][value=applied]")
    page.fill("#id_external_ref", "rf_typo")
    page.fill("#id_note", "the provider's ledger shows the refund")
    walk.click(page.get_by_role("button", name="Reconcile"))
    expect(card).to_contain_text("not among the provider's records")
    walk.shot("04-reconciliation", page.locator("main"))
    # Sure of the typo, the person ticks that they checked it: taken, and wrong; the refund's verify
    # stops the run, and the run's page offers the correction.
    reference = page.locator("#provider-records [data-external-ref]").first.inner_text().strip()
    page.check("input[name=checked_by_hand]")
    page.fill("#id_note", "the provider's support read it to me on the phone")
    walk.click(page.get_by_role("button", name="Reconcile"))
    expect(page.locator("ul.messages")).to_contain_text("Reconciled")
    correct = page.locator("#correct-reconciliation")
    deadline = time.monotonic() + WAIT / 1000
    while True:
        walk.go(f"/support/runs/{k.runs['unknown_operation']}/")
        if (correct.count() and "may be wrong" in correct.inner_text()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    walk.click(correct.get_by_role("link", name="Correct the reconciliation"))
    page.locator(f"#correct-form input[name=correct-pick][value='{reference}']").check()
    page.fill("#id_correct-note", "rf_typo was misheard; the provider's ledger lists the refund")
    walk.shot("04b-correct-reconciliation", page.locator("#reconciliations"), page.locator("#correct-form"))
    walk.click(page.get_by_role("button", name="Correct the reconciliation"))
    expect(page.locator("ul.messages")).to_contain_text("Corrected")
    walk.shot("04c-reconciliations-kept", page.locator("ul.messages"), page.locator("#reconciliations"))
    walk.go("/support/")
    section = page.locator("#engineer-only")
    walk.click(section.locator("tr", has_text="changed outside Keeper").get_by_role("link", name="Open"))
    expect(page.locator("#engineer-only-notice")).to_contain_text("an engineer")
    walk.shot("05-engineer-only", page.locator("main"))

    # --- compliance ----------------------------------------------------------------------------
    page = walk.sign_in("acme-compliance")
    walk.go("/compliance/?tenant=acme&subject=cust-1001")
    expect(page.locator("#holds")).to_contain_text("answer in German")
    walk.shot("06-subject-person-first", page.locator("main"))
    walk.click(
        page.get_by_role("link", name="Erase this subject…")
        .or_(page.get_by_role("button", name="Erase this subject…"))
        .first
    )
    walk.shot("07-erasure-will-close", page.locator("#will-close"))
    page.fill("input[name=subject_confirm]", "cust-1001")
    page.fill("textarea[name=note]", "the customer asked to be forgotten (ticket D-1)")
    walk.click(page.get_by_role("button", name="Erase permanently"))
    status = page.locator("#erasure-status")
    expect(status).to_have_attribute("data-status", "completed", timeout=WAIT)
    walk.shot("08b-erasure-receipt", page.locator("main"), tallest=1400)
    # A failed erasure: a document of the company names the next customer (as a ticket would).
    document = "ticket-cust-2002"
    api = Api(k, tenant="acme")
    api.call(
        "POST",
        "/api/v1/retrieval/documents/",
        {
            "document_id": document,
            "source_uri": "crm://tickets/2002",
            "source_version": "v1",
            "media_type": "text/markdown",
            "acl": ["group:support"],
            "wait": True,
            "text": "# Ticket\n\ncust-2002 asked where their parcel to Lisbon is.",
        },
    )
    walk.go("/compliance/?tenant=acme&subject=cust-2002")
    walk.click(
        page.get_by_role("link", name="Erase this subject…")
        .or_(page.get_by_role("button", name="Erase this subject…"))
        .first
    )
    page.fill("input[name=subject_confirm]", "cust-2002")
    page.fill("textarea[name=note]", "the customer asked to be forgotten (ticket D-3)")
    walk.click(page.get_by_role("button", name="Erase permanently"))
    expect(status).to_have_attribute("data-status", "failed", timeout=WAIT)
    walk.shot("08-erasure-failed-retry", page.locator("#erasure-failed"))
    api.call("DELETE", f"/api/v1/retrieval/documents/{document}/")
    walk.click(page.get_by_role("button", name="Retry the erasure"))
    expect(status).to_have_attribute("data-status", "completed", timeout=WAIT)
    walk.go("/compliance/")
    walk.shot("09-menu-held-claims-offboardings", page.locator("header.top"))
    walk.click(page.locator("header.top").get_by_role("link", name="Audit log"))
    walk.shot("10-audit-filters-export")
    walk.go("/compliance/?tenant=acme&subject=cust-1003")
    walk.click(page.locator("#holds a.provenance").first)
    walk.shot("11-provenance", page.locator("main"))
    # The erased customer's approval, closed for good, as support sees it now.
    page = walk.sign_in("acme-support")
    walk.go("/support/")
    walk.shot("05b-closed-by-erasure", page.locator("#closed-by-erasure"))
    # The offboarding comes last among the people's steps: it takes globex away.
    page = walk.sign_in("operator")
    walk.go("/compliance/globex/offboarding/")
    page.fill("input[name=slug_confirm]", "globex")
    page.fill("textarea[name=note]", "contract ended (ticket D-2)")
    walk.click(page.get_by_role("button", name="Erase tenant permanently"))
    expect(page.locator("main")).to_contain_text("found nothing of this tenant", timeout=WAIT)
    page = walk.sign_in("globex-support")
    expect(page.locator("ul.messages li.offboarded")).to_be_visible()
    walk.shot("12-offboarded-at-sign-in", page.locator("main"))

    # --- engineers -----------------------------------------------------------------------------
    page = walk.sign_in("acme-engineer")
    walk.go("/runs/")
    walk.shot("13-menu", page.locator("header.top"))
    walk.click(page.locator("#run-table").get_by_role("link", name="started").first)
    walk.shot("16-run-list-columns", page.locator("#run-table"))
    walk.shot("21b-sortable-run-list", page.locator("p.sort-bar"), page.locator("#run-table thead"))
    walk.click(page.locator("#run-table thead").get_by_role("link", name="workflow"))
    walk.shot("21c-run-list-by-workflow", page.locator("#run-table"), tallest=900)
    completed = k.runs["completed"]
    walk.go(f"/runs/{completed}/")
    walk.shot("14-input-result", page.locator("#run-input"), page.locator("#run-result"))
    walk.shot("15-step-output", page.locator("#steps"))
    walk.shot("23-timeline", page.locator("#timeline"))
    page.fill("#diff-form input[name=a]", "2")
    page.fill("#diff-form input[name=b]", "4")
    page.locator("#diff-form").get_by_role("button", name="Compare").click()
    expect(page.locator("#revision-panel")).to_contain_text("$.remaining")
    walk.shot("24-state-diff", page.locator("#diff-form"), page.locator("#revision-panel"))
    fork = page.locator("#fork-form")
    fork.locator("input[name=at_seq]").fill("3")
    fork.locator("input[name=note]").fill("try the last ticks again")
    walk.click(fork.get_by_role("button", name="Fork"))
    expect(page.locator("ul.messages")).to_contain_text("was forked at event 3")
    walk.shot("25-fork-rewind", page.locator("ul.messages"), page.locator("#run-facts"))
    walk.go(f"/runs/{completed}/")
    rewind = page.locator("#rewind-form")
    rewind.locator("input[name=at_seq]").fill("2")
    rewind.locator("input[name=note]").fill("start over from the first tick")
    walk.click(rewind.get_by_role("button", name="Rewind"))
    page.fill("#confirm-note", "start over from the first tick")
    walk.click(page.locator("#confirm-form button[type=submit]"))
    expect(page.locator("ul.messages")).to_contain_text("was rewound to event 2")
    walk.go(f"/runs/?q={completed}")
    expect(page.locator(f'tr[data-run="{completed}"]')).to_contain_text("superseded")
    walk.shot("17-superseded", page.locator("#run-table"))
    refused = k.runs["refused_resume"]
    walk.go(f"/runs/{refused}/")
    walk.shot("26-refused-resume-diff", page.locator("#actions"), page.locator("#state-change"))
    change = page.locator("#state-change")
    change.locator("input[name=note]").fill("the operator set remaining to 99 on purpose")
    walk.click(change.get_by_role("button", name="Accept the changed state"))
    page.locator("#actions input[name=note]").first.fill("continue from the accepted state")
    walk.click(page.locator("#actions").get_by_role("button", name="Resume"))
    expect(page.locator("ul.messages")).to_contain_text("a worker verifies")
    walk.shot("18-honest-result", page.locator("ul.messages"), page.locator("#actions"))
    credit = k.runs["credit_waiting_for_documents"]
    walk.go(f"/runs/{credit}/")
    query = page.locator("#query-form")
    query.locator("select[name=name]").select_option("progress")
    query.get_by_role("button", name="Run the query").click()
    expect(page.locator("#query-answer")).to_contain_text("waiting for documents")
    signal_form = page.locator("#signal-form")
    signal_form.locator("select[name=name]").select_option("documents_received")
    signal_form.locator("textarea[name=payload]").fill('{"documents": ["payslip-2026-11.pdf"]}')
    signal_form.locator("input[name=note]").fill("the customer uploaded the payslip")
    walk.shot("19-signal-query", page.locator("#query-form"), page.locator("#query-answer"), signal_form)
    walk.go("/schedules/")
    walk.shot("20-schedules", page.locator("main"))
    walk.go("/workers/")
    walk.click(page.locator("#workers tbody tr a").first)
    walk.shot("22-worker-tasks", page.locator("main"), tallest=1300)
    took = page.locator("#worker-tasks th", has_text="took")
    took.get_by_role("button").click()
    took.get_by_role("button").click()
    expect(took).to_have_attribute("aria-sort", "descending")
    walk.shot("21-sortable", page.locator("#worker-tasks"), tallest=700)
    walk.go("/runs/?status=suspended")
    bar = page.locator("form.bulk-bar")
    bar.locator("select[name=action]").select_option("cancel")
    walk.click(bar.locator("button").first)
    walk.shot("27-bulk-dry-run", page.locator("main"))
    walk.go("/queue/")
    walk.shot("28-queue-health", page.locator("main"))
    walk.go("/webhooks/")
    walk.shot("29b-webhooks", page.locator("main"))
    walk.go("/charts/")
    walk.shot("30-charts", page.locator("main"))
    page = walk.sign_in("admin")
    walk.go("/admin/")
    walk.shot("29-admin-plurals", page.locator("#content-main"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a Keeper already running (default: start one as `make run` does)")
    parser.add_argument("--data-dir", type=Path, help="that Keeper's data folder (the demo's sign-ins)")
    parser.add_argument("--support-only", action="store_true", help="only the four support screens")
    parser.add_argument("--prefix", default="", help="put before each file's name (before-, after-)")
    parser.add_argument("--out", type=Path, default=OUT)
    options = parser.parse_args(argv)
    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    options.out.mkdir(parents=True, exist_ok=True)
    prefix = f"{options.prefix}-" if options.prefix and not options.prefix.endswith("-") else options.prefix

    def walk_with(keeper: Keeper) -> list[Path]:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, headless=True)
            walk = Walk(browser, keeper, options.out, prefix)
            steps: list[Callable[[Walk], None]] = [support_screens]
            if not options.support_only:
                steps.append(points)
            for step in steps:
                if step is support_screens and not options.support_only:
                    walk.prefix = prefix or "after-"
                step(walk)
                walk.prefix = prefix
            browser.close()
        return walk.saved

    if options.url:
        if options.data_dir is None:
            raise SystemExit("--url needs --data-dir (where that Keeper's demo-credentials.txt is)")
        saved = walk_with(Keeper.read(options.url.rstrip("/"), options.data_dir))
    else:
        with (
            tempfile.TemporaryDirectory(prefix="keeper-screens-") as folder,
            make_run(Path(folder)) as keeper,
        ):
            saved = walk_with(keeper)
    total = sum(p.stat().st_size for p in saved)
    print(f"{len(saved)} screenshots, {total / 1e6:.1f} MB, in {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
