"""What a workflow declares about merging a branch back (runs.authoring: `wf.merge_state`,
`wf.merge_resolver`), by workflow name: the engine's merge reads it here, below the authoring package."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

State = dict[str, Any]


@dataclass(frozen=True)
class MergeConflict:
    """One conflict a resolver is asked about: a text hunk (`kind` "text": the lines of the common
    ancestor, ours = the target's, theirs = the merged branch's), a file one side deleted and the
    other changed ("deleted": a side that deleted it is None), or a binary file ("binary": no text)."""

    id: str
    path: str
    kind: str
    base: str | None
    ours: str | None
    theirs: str | None


@dataclass(frozen=True)
class MergePick:
    """A resolver's (or a person's) answer to one conflict: a side, or text written for it."""

    take: Literal["ours", "theirs", "edited"]
    text: str = ""

    @classmethod
    def ours(cls) -> MergePick:
        return cls("ours")

    @classmethod
    def theirs(cls) -> MergePick:
        return cls("theirs")

    @classmethod
    def edited(cls, text: str) -> MergePick:
        return cls("edited", text)


StateRule = Callable[[State, State, State], State]  # (base, ours, theirs) -> the merged state
Resolver = Callable[[MergeConflict], MergePick | None]  # None: a person decides


@dataclass(frozen=True)
class MergeRules:
    state: StateRule | None = None
    resolver: Resolver | None = None


_rules: dict[str, MergeRules] = {}


def merge_rules_register(workflow_name: str, rules: MergeRules) -> None:
    _rules[workflow_name] = rules


def merge_rules_of(workflow_name: str) -> MergeRules:
    """What the workflow declared (nothing: the default state rule, conflicts go to a person)."""
    return _rules.get(workflow_name, MergeRules())
