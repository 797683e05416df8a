"""docs/how-to/testing-workflows.md's python blocks are one module (the workflow and its tests):
each of its tests runs here with the fixtures it names, so the page cannot drift from the kit."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "testing-workflows.md"
MODULE = "keeper_guide_returns"


def _source() -> str:
    return "\n\n".join(re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M))


def _module(tmp: Path) -> ModuleType:
    if MODULE not in sys.modules:
        path = tmp / f"{MODULE}.py"
        path.write_text(_source())
        spec = importlib.util.spec_from_file_location(MODULE, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[MODULE] = module
    return sys.modules[MODULE]


PAGE_TESTS = re.findall(r"^def (test_\w+)\(", _source(), flags=re.M)


def test_the_page_shows_every_part_of_the_kit():
    assert len(PAGE_TESTS) >= 5
    for part in ("keeper_env.advance(", "fake_tool(", "keeper_env.signal(", "keeper_env.approve(",
                 "lookups_answer(", "assert_replays(", "chat_complete(", "replay_check"):  # fmt: skip
        assert part in PAGE.read_text(), part


@pytest.mark.parametrize("name", PAGE_TESTS)
def test_the_pages_test_passes(name, request, tmp_path_factory):
    function = getattr(_module(tmp_path_factory.mktemp("guide")), name)
    function(**{arg: request.getfixturevalue(arg) for arg in inspect.signature(function).parameters})
