"""Three-way merge of one file's text against its common ancestor, line by line (pure, no database).

Each side's changes are the non-equal blocks of a diff of the ancestor with that side. Changes of the
two sides whose ancestor ranges overlap or touch form one group: a group one side alone changed takes
that side's lines, a group both changed to the same lines takes them once, and any other group is a
conflict that keeps the ancestor's, ours and theirs lines for whoever resolves it. Touching ranges
conflict on purpose (as git's merge does): two edits next to each other are rarely independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher


@dataclass(frozen=True)
class Hunk:
    """Lines both sides changed differently: the ancestor's, ours (the target's) and theirs (the source's)."""

    base: tuple[str, ...]
    ours: tuple[str, ...]
    theirs: tuple[str, ...]


Piece = tuple[str, ...] | Hunk


def _changes(base: list[str], other: list[str]) -> list[tuple[int, int, tuple[str, ...]]]:
    matcher = SequenceMatcher(None, base, other, autojunk=False)
    return [(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _apply(
    base: list[str], start: int, end: int, changes: list[tuple[int, int, tuple[str, ...]]]
) -> tuple[str, ...]:
    """The lines base[start:end] become once these changes (all inside that range) are applied."""
    out: list[str] = []
    at = start
    for c_start, c_end, lines in changes:
        out.extend(base[at:c_start])
        out.extend(lines)
        at = c_end
    out.extend(base[at:end])
    return tuple(out)


def merge_lines(base: list[str], ours: list[str], theirs: list[str]) -> list[Piece]:
    """The merged file as pieces: runs of settled lines, and hunks both sides changed differently."""
    tagged = sorted(
        [(s, e, lines, 0) for s, e, lines in _changes(base, ours)]
        + [(s, e, lines, 1) for s, e, lines in _changes(base, theirs)],
        key=lambda c: (c[0], c[1], c[3]),
    )
    pieces: list[Piece] = []
    at = 0
    i = 0
    while i < len(tagged):
        start, end = tagged[i][0], tagged[i][1]
        group = [tagged[i]]
        i += 1
        while i < len(tagged) and tagged[i][0] <= end:
            end = max(end, tagged[i][1])
            group.append(tagged[i])
            i += 1
        if start > at:
            pieces.append(tuple(base[at:start]))
        mine = [(s, e, lines) for s, e, lines, side in group if side == 0]
        other = [(s, e, lines) for s, e, lines, side in group if side == 1]
        ours_lines = _apply(base, start, end, mine)
        theirs_lines = _apply(base, start, end, other)
        if not other or ours_lines == theirs_lines:
            pieces.append(ours_lines)
        elif not mine:
            pieces.append(theirs_lines)
        else:
            pieces.append(Hunk(tuple(base[start:end]), ours_lines, theirs_lines))
        at = end
    if at < len(base):
        pieces.append(tuple(base[at:]))
    return [p for p in pieces if isinstance(p, Hunk) or p]


def split_lines(text: str) -> list[str]:
    """Lines with their endings kept, so joining them gives the text back byte for byte."""
    return text.splitlines(keepends=True)
