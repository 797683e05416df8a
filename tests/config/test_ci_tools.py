"""Every program the suite shells out to is installed by .ci/run, and a test that needs one skips
with "install X" where it is missing (a fresh CI machine may have no docker-compose)."""

from __future__ import annotations

import re
import subprocess

from core.processes import ROOT

# Present on every POSIX machine the suite runs on; nothing installs them.
BASE_TOOLS = {"sh", "bash"}
SOURCES = ("tests", "config", "core", "runs", "memory", "retrieval", "workers", "console", "sandbox")


def _ci_tools() -> set[str]:
    match = re.search(r"^TOOLS=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text(), re.M)
    assert match, ".ci/run must list the tools it installs as TOOLS=(...)"
    return set(match.group(1).split())


def _shelled_out() -> dict[str, set[str]]:
    """tool -> the files that look it up (shutil.which) or run it by name (subprocess)."""
    found: dict[str, set[str]] = {}
    patterns = (
        r"shutil\.which\(\s*[\"']([\w.-]+)[\"']",
        r"subprocess\.(?:run|Popen|call|check_call|check_output)\(\s*\[\s*[\"']([\w.-]+)[\"']",
    )
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for pattern in patterns:
                for tool in re.findall(pattern, text):
                    found.setdefault(tool, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_tools_the_suite_is_known_to_need():
    assert {"chromium", "docker-compose", "sh"} <= set(_shelled_out())


def test_ci_installs_every_tool_the_suite_shells_out_to():
    missing = {
        tool: sorted(files)
        for tool, files in _shelled_out().items()
        if tool not in BASE_TOOLS and tool not in _ci_tools()
    }
    assert not missing, f".ci/run does not install: {missing}"


def test_a_missing_tool_skips_its_tests_with_what_to_install():
    for tool, files in _shelled_out().items():
        if tool in BASE_TOOLS:
            continue
        for name in files:
            text = (ROOT / name).read_text()
            if f'shutil.which("{tool}")' not in text:
                raise AssertionError(f"{name} runs {tool} without looking it up first (shutil.which)")
            # A test skips; a tool run by hand (tests/console/screenshots.py) stops with the same words.
            skip = re.search(r"(?:pytest\.skip|SystemExit)\([^)]*install[^)]*\)", text)
            assert skip and tool in skip.group(0), f"{name}: no pytest.skip naming `install {tool}`"


def test_the_ci_script_is_valid_bash_and_installs_quietly():
    script = (ROOT / ".ci" / "run").read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], capture_output=True).returncode == 0
    assert "DEBIAN_FRONTEND=noninteractive" in script and script.count("apt-get update") == 1
    assert "apt-get install -y -qq" in script
