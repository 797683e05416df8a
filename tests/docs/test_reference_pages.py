"""The reference pages of event types and of suspend/refusal reasons name every one the code writes.

The code is read, not run: the ways a run's event type or suspend reason is spelt in Keeper's
Python and SQL (a keyword argument, a constant, a refusal, a suspension, a SQL literal) are
collected, and each must be documented. The other way round, each documented code must still be in
the code, so a page cannot keep a reason nothing writes any more.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.processes import ROOT

APPS = ("runs", "core", "memory", "retrieval", "console", "workers")
EVENTS_PAGE = ROOT / "docs" / "reference" / "events.md"
REASONS_PAGE = ROOT / "docs" / "reference" / "reasons.md"
NAME = r"""["']([a-z][a-z0-9_]+)["']"""

EVENT_PATTERNS = (
    rf"event_type\s*(?::\s*str\s*)?=\s*{NAME}",
    rf"""["']event_type["']\s*:\s*{NAME}""",
    rf"\b[A-Z_]*_EVENT\s*=\s*{NAME}",
    r"INSERT INTO (?:public\.)?agent_events\s*\([^)]*\)\s*(?:VALUES\s*\(|SELECT)\s*[\w.]+,\s*[\w.]+,\s*[\w.]+,"
    r"\s*'([a-z_]+)'",
)
# Tuples of event types: CONVERSATION_EVENTS, STEP_EVENTS.
EVENT_TUPLES = r"\b[A-Z_]*_EVENTS\s*=\s*\(([^)]*)\)"
EVENT_PREFIXES = r"""event_type\s*=\s*f["']([a-z_]+)\{"""

REASON_PATTERNS = (
    rf"_Suspension\(\s*{NAME}",
    rf"_refuse\(\s*\w+,\s*{NAME}",
    rf"(?<![\w.])_?suspend\(\s*(?:\w+,\s*\w+,\s*)?{NAME}",
    rf"(?<![\w.])stop\(\s*{NAME}",  # runs/kernel/decide.py: a claim that ends suspended
    rf"Invalid\(\s*{NAME}",  # an outcome the kernel cannot commit: Keeper's worker suspends with it
    rf"ctx\.suspend\(\s*\w+,\s*{NAME}",
    rf"suspend_reason\s*=\s*(?:None if \w+ else\s*)?{NAME}",
    rf"^\s*reason(?:, detail)? = {NAME}",
    rf"^(?:[A-Z_]*_REASON|TIMER|SIGNAL|CHILD_RUN|AWAITING_INPUT|OUTSIDE_ONLY|SUBJECT_ERASED"
    rf"|RECONCILIATION_REQUIRED)\s*=\s*{NAME}",
)
# The codes of the errors a step's suspension or a resume's refusal takes its reason from
# (`suspend(exc.code, ...)`, `_refuse(name, exc.code, ...)`): the error classes' own codes, and the
# codes the state's encoder and the artifact store raise with.
REASON_ERROR_CLASSES = (
    r"class (?:InvalidState|UnsupportedCheckpoint|StateSchemaInvalid|BudgetExhausted|DeadlinePassed"
    r"|OperationRequestChanged|OperationOfAnotherRun|OperationInFlight"
    r"|ArtifactMissing|ArtifactRefused|ArtifactMismatch|ArtifactStoreUnavailable)"
    rf"\b[^\n]*\n(?:[^\n]*\n){{0,3}}?\s*code = {NAME}"
)
STATE_ERROR_RAISES = (
    rf"raise (?:InvalidState|InvalidInput|NotFound|Artifact\w+)\((?:(?!raise ).){{0,400}}?code={NAME}"
)
# The state's encoder, and the artifact store's reads that resume verification's check 3 makes.
STATE_ERROR_MODULES = {"runs/kernel/state.py", "core/artifacts/services.py"}
# SQL comparisons of suspend_reason with one literal or a list of them.
REASON_SQL = r"suspend_reason\s*(?:=|<>|IS (?:NOT )?DISTINCT FROM|IN)\s*(\('[^)]*\)|'[a-z_]+')"
RESERVED = r"RESERVED_REASONS = frozenset\(\s*\{(.*?)\}\s*\)"
# The error classes whose codes are reasons live in these modules.
REASON_ERROR_MODULES = {
    "core/artifacts/errors.py",
    "runs/engine/state_migrations.py",
    "runs/kernel/budgets.py",
    "runs/engine/charges.py",
    "runs/engine/operations.py",
    "runs/kernel/errors.py",
}


def _sources() -> dict[str, str]:
    texts = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*")):
            if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts:
                texts[str(path.relative_to(ROOT))] = path.read_text()
    return texts


def _literals(text: str) -> set[str]:
    return set(re.findall(r"""["']([a-z][a-z0-9_]+)["']""", text))


def code_event_types() -> tuple[set[str], set[str]]:
    """The event types the code writes, and the prefixes of those it builds (f"approval_{status}")."""
    found: set[str] = set()
    prefixes: set[str] = set()
    for text in _sources().values():
        for pattern in EVENT_PATTERNS:
            found |= set(re.findall(pattern, text, flags=re.M))
        for group in re.findall(EVENT_TUPLES, text):
            found |= _literals(group)
        prefixes |= set(re.findall(EVENT_PREFIXES, text))
    return found, prefixes


def code_reasons() -> set[str]:
    found: set[str] = set()
    for path, text in _sources().items():
        for pattern in REASON_PATTERNS:
            found |= set(re.findall(pattern, text, flags=re.M))
        if path in REASON_ERROR_MODULES:
            found |= set(re.findall(REASON_ERROR_CLASSES, text))
        if path in STATE_ERROR_MODULES:
            found |= set(re.findall(STATE_ERROR_RAISES, text, flags=re.S))
        for group in re.findall(REASON_SQL, text):
            found |= _literals(group)
        for group in re.findall(RESERVED, text, flags=re.S):
            found |= _literals(group)
    return found


def documented(page: Path) -> set[str]:
    """The codes in the first column of the page's tables."""
    names: set[str] = set()
    for line in page.read_text().splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z][a-z0-9_]+)`", line.split("|")[1]))
    return names


def _in_code(name: str, prefixes: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    quoted = (f'"{name}"', f"'{name}'")
    if any(name.startswith(p) for p in prefixes):
        return True
    return any(q in text for text in _sources().values() for q in quoted)


def test_the_scan_finds_what_the_code_writes():
    events, prefixes = code_event_types()
    assert {
        "run_started",
        "step_completed",
        "resume_refused",
        "child_finished",
        "langgraph_checkpoint",
    } <= events
    assert "approval_" in prefixes
    reasons = code_reasons()
    assert {
        "unknown_step",
        "approval_required",
        "timer",
        "state_too_large",
        "operation_of_another_run",
    } <= reasons
    assert {"langgraph_interrupt", "awaiting_input", "budget_exhausted", "artifact_missing"} <= reasons


def test_every_event_type_the_code_writes_is_documented():
    events, prefixes = code_event_types()
    page = documented(EVENTS_PAGE)
    missing = sorted(events - page)
    assert not missing, f"event types written by the code but not in {EVENTS_PAGE.name}: {missing}"
    for prefix in prefixes:
        assert any(name.startswith(prefix) for name in page), f"no documented event type starts {prefix!r}"


def test_every_documented_event_type_is_still_written():
    _, prefixes = code_event_types()
    stale = sorted(name for name in documented(EVENTS_PAGE) if not _in_code(name, prefixes))
    assert not stale, f"documented in {EVENTS_PAGE.name} but nowhere in the code: {stale}"


def test_every_reason_the_code_writes_is_documented_with_what_to_do():
    reasons = code_reasons()
    page = documented(REASONS_PAGE)
    missing = sorted(reasons - page)
    assert not missing, f"suspend or refusal reasons in the code but not in {REASONS_PAGE.name}: {missing}"
    for line in REASONS_PAGE.read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert len(cells) >= 3 and all(cells), f"a row without what happened or what to do: {line}"


def test_every_documented_reason_is_still_in_the_code():
    stale = sorted(name for name in documented(REASONS_PAGE) if not _in_code(name))
    assert not stale, f"documented in {REASONS_PAGE.name} but nowhere in the code: {stale}"


COMMANDS_PAGE = ROOT / "docs" / "reference" / "management-commands.md"


def test_every_management_command_of_keeper_has_a_section():
    commands = {
        path.stem
        for path in ROOT.glob("*/management/commands/*.py")
        if path.stem != "__init__" and ".venv" not in path.parts
    }
    assert {"start_run", "tenant_erase", "bench", "migrate"} <= commands
    sections = set(re.findall(r"^### (\w+)$", COMMANDS_PAGE.read_text(), flags=re.M))
    assert not commands - sections, (
        f"commands without a section in {COMMANDS_PAGE.name}: {commands - sections}"
    )
    assert not sections - commands, f"sections for commands that do not exist: {sections - commands}"
