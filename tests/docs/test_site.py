"""The documentation site builds strictly (a broken link, a missing anchor or a page left out of the
nav fails it), and the short README points at pages that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.processes import ROOT


def _mkdocs_or_skip() -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs-material is not installed; it is in the dev extras (pip install -e '.[dev]')")
        pytest.skip(
            "mkdocs-material is not installed (pip install -e '.[dev]'); the site's build is not checked"
        )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    _mkdocs_or_skip()
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
        + ["--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").exists()


def test_every_page_under_docs_is_in_the_nav() -> None:
    """The strict build says so too; this names the page without needing mkdocs."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(p for p in pages if f": {p}" not in nav and f"- {p}" not in nav)
    assert not missing, f"pages under docs/ that mkdocs.yml's nav leaves out: {missing}"


def test_the_readme_is_short_and_its_links_reach_files() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make run" in readme and "make test" in readme and "make docs" in readme
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links no page of the site"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
