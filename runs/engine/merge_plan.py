"""What a merge makes of the files and the state of two runs of one tree, against their common fork point.

Files are merged three-way: a file only one side changed takes that side's version (a deletion too),
a file both changed the same way is taken once, a text file both changed is merged line by line
(runs.engine.merge_three_way), and what is left (overlapping lines, a binary file both changed, a
file one side deleted and the other changed) is a conflict. The state is merged by the rule the
workflow declares (runs.engine.merge_rules); the default takes the keys only the branch changed and
refuses keys both sides changed differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from core.artifacts import artifact_get, artifact_put_many
from core.errors import Conflict, InvalidInput
from runs.engine.merge_rules import MergeConflict, MergePick, State, merge_rules_of
from runs.engine.merge_three_way import Hunk, Piece, merge_lines, split_lines

Ref = dict[str, Any]
# Keys the engine keeps in every state (budgets spent, signals seen): each run keeps its own.
ENGINE_KEYS = frozenset({"budgets", "signals_seen"})
_MISSING = object()


class StateMergeRefused(Conflict):
    """Both sides changed the same keys of the state and the workflow declares no rule for it."""

    code = "state_merge_refused"


@dataclass
class FilePlan:
    manifest: dict[str, Ref] = field(default_factory=dict)  # the result's settled files
    sides: dict[str, dict[str, Ref | None]] = field(default_factory=dict)  # conflicting files' versions
    taken: dict[str, str] = field(default_factory=dict)  # every path either side changed: from where
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def _digest(ref: Ref | None) -> str | None:
    return None if ref is None else str(ref.get("digest"))


def _text(data: bytes) -> str | None:
    """The bytes as text, or None for a binary file (not UTF-8, or with a NUL byte)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read(tenant_id: UUID, ref: Ref | None) -> bytes | None:
    return None if ref is None else artifact_get(tenant_id=tenant_id, ref=ref)


def _pieces(tenant_id: UUID, sides: dict[str, Ref | None]) -> list[Piece] | None:
    """The line merge of a file's three versions, or None if one of them is not text or is deleted."""
    texts = []
    for side in ("base", "ours", "theirs"):
        data = _read(tenant_id, sides[side])
        if data is None:
            if side == "base":
                texts.append("")
                continue
            return None
        text = _text(data)
        if text is None:
            return None
        texts.append(text)
    return merge_lines(split_lines(texts[0]), split_lines(texts[1]), split_lines(texts[2]))


def _conflict(
    path: str, index: int, kind: str, base: str | None, ours: str | None, theirs: str | None
) -> dict[str, Any]:
    return {"id": f"{path}#{index}", "path": path, "kind": kind, "base": base, "ours": ours, "theirs": theirs}


def _shown(tenant_id: UUID, ref: Ref | None) -> str | None:
    data = _read(tenant_id, ref)
    return None if data is None else _text(data)


def files_plan(
    *, tenant_id: UUID, base: dict[str, Ref], ours: dict[str, Ref], theirs: dict[str, Ref]
) -> FilePlan:
    """The merged files; `ours` is the target's, `theirs` the merged branch's."""
    plan = FilePlan()
    merged_text: dict[str, bytes] = {}
    for path in sorted(set(base) | set(ours) | set(theirs)):
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        bd, od, td = _digest(b), _digest(o), _digest(t)
        if od == td:
            if o is not None:
                plan.manifest[path] = o
            if od != bd:
                plan.taken[path] = "both"
            continue
        if td == bd:
            if o is not None:
                plan.manifest[path] = o
            plan.taken[path] = "ours"
            continue
        if od == bd:
            if t is not None:
                plan.manifest[path] = t
            plan.taken[path] = "theirs"
            continue
        sides = {"base": b, "ours": o, "theirs": t}
        pieces = _pieces(tenant_id, sides)
        if pieces is not None and not any(isinstance(p, Hunk) for p in pieces):
            merged_text[path] = "".join(line for p in pieces if not isinstance(p, Hunk) for line in p).encode(
                "utf-8"
            )
            plan.taken[path] = "merged"
            continue
        plan.sides[path] = sides
        plan.taken[path] = "conflict"
        if pieces is not None:
            hunks = [p for p in pieces if isinstance(p, Hunk)]
            for index, h in enumerate(hunks):
                plan.conflicts.append(
                    _conflict(path, index, "text", "".join(h.base), "".join(h.ours), "".join(h.theirs))
                )
        else:
            kind = "deleted" if o is None or t is None else "binary"
            plan.conflicts.append(
                _conflict(path, 0, kind, _shown(tenant_id, b), _shown(tenant_id, o), _shown(tenant_id, t))
            )
    if merged_text:
        refs = artifact_put_many(tenant_id=tenant_id, blobs=list(merged_text.values()), kind="workspace")
        plan.manifest.update(zip(merged_text, refs, strict=True))
    return plan


def picks_check(conflicts: list[dict[str, Any]], picks: dict[str, MergePick]) -> None:
    """Every conflict answered, each once, with a side or (for text) text."""
    ids = {c["id"] for c in conflicts}
    unknown = sorted(set(picks) - ids)
    if unknown:
        raise InvalidInput(f"no conflict {unknown[0]!r} in this merge", code="merge_unknown_conflict")
    missing = sorted(ids - set(picks))
    if missing:
        raise InvalidInput(
            f"{len(missing)} conflict(s) have no answer, first {missing[0]!r}",
            code="merge_unresolved",
            details={"unresolved": missing},
        )
    for c in conflicts:
        pick = picks[c["id"]]
        if pick.take not in ("ours", "theirs", "edited"):
            raise InvalidInput(f"take ours, theirs or edited, not {pick.take!r}", code="merge_invalid_pick")
        if pick.take == "edited" and c["kind"] == "binary":
            raise InvalidInput(
                f"{c['path']} is a binary file: take ours or theirs", code="merge_binary_edited"
            )


def _edited(text: str, like: str) -> str:
    """A person's text for a hunk: browsers send CRLF; the hunk's lines end in a newline, so it does."""
    text = text.replace("\r\n", "\n")
    if text and like.endswith("\n") and not text.endswith("\n"):
        text += "\n"
    return text


def files_resolved(
    *,
    tenant_id: UUID,
    plan_manifest: dict[str, Ref],
    sides: dict[str, dict[str, Ref | None]],
    conflicts: list[dict[str, Any]],
    picks: dict[str, MergePick],
) -> dict[str, Ref]:
    """The result's files once every conflict has its pick."""
    manifest = dict(plan_manifest)
    written: dict[str, bytes] = {}
    for path, three in sorted(sides.items()):
        mine = [c for c in conflicts if c["path"] == path]
        if mine and mine[0]["kind"] != "text":
            pick = picks[mine[0]["id"]]
            if pick.take == "edited":
                written[path] = _edited(pick.text, "\n").encode("utf-8")
            elif (chosen := three[pick.take]) is not None:
                manifest[path] = chosen
            continue
        pieces = _pieces(tenant_id, three) or []
        out: list[str] = []
        index = 0
        for piece in pieces:
            if not isinstance(piece, Hunk):
                out.extend(piece)
                continue
            pick = picks[f"{path}#{index}"]
            index += 1
            if pick.take == "edited":
                out.append(_edited(pick.text, "".join(piece.ours) or "".join(piece.theirs)))
            else:
                out.extend(piece.ours if pick.take == "ours" else piece.theirs)
        written[path] = "".join(out).encode("utf-8")
    if written:
        refs = artifact_put_many(tenant_id=tenant_id, blobs=list(written.values()), kind="workspace")
        manifest.update(zip(written, refs, strict=True))
    return manifest


def resolver_picks(workflow_name: str, conflicts: list[dict[str, Any]]) -> dict[str, MergePick] | None:
    """The workflow's resolver's answer to every conflict, or None if it declares none or leaves one."""
    resolver = merge_rules_of(workflow_name).resolver
    if resolver is None or not conflicts:
        return None
    picks: dict[str, MergePick] = {}
    for c in conflicts:
        pick = resolver(MergeConflict(c["id"], c["path"], c["kind"], c["base"], c["ours"], c["theirs"]))
        if pick is None:
            return None
        picks[c["id"]] = pick
    picks_check(conflicts, picks)
    return picks


def state_plan(
    *, workflow_name: str, base: State, ours: State, theirs: State
) -> tuple[State | None, dict[str, Any]]:
    """(the merged state, or None when the target's stays as it is; what was taken, for the record).

    A declared rule gets the three states and returns the merged one. The default takes each key only
    the branch changed (engine keys stay the target's) and refuses when both changed one differently.
    """
    rule = merge_rules_of(workflow_name).state
    if rule is not None:
        merged = rule(dict(base), dict(ours), dict(theirs))
        if not isinstance(merged, dict):
            raise InvalidInput(
                "the workflow's merge_state rule must return a dict", code="merge_state_rule_invalid"
            )
        for key in ENGINE_KEYS:
            if key in ours:
                merged[key] = ours[key]
        return (None if merged == ours else merged), {"rule": getattr(rule, "__name__", "declared")}
    keys = (set(base) | set(ours) | set(theirs)) - ENGINE_KEYS
    ours_changed = {k for k in keys if ours.get(k, _MISSING) != base.get(k, _MISSING)}
    theirs_changed = {k for k in keys if theirs.get(k, _MISSING) != base.get(k, _MISSING)}
    both = sorted(
        k for k in ours_changed & theirs_changed if ours.get(k, _MISSING) != theirs.get(k, _MISSING)
    )
    if both:
        raise StateMergeRefused(
            f"both runs changed the state's {', '.join(map(repr, both))} since they forked, and the workflow "
            "declares no merge_state rule: merge refused (nothing was written)",
            details={"keys": both},
        )
    take = sorted(theirs_changed - ours_changed)
    if not take:
        return None, {"theirs": []}
    merged = dict(ours)
    for key in take:
        if key in theirs:
            merged[key] = theirs[key]
        else:
            merged.pop(key, None)
    return merged, {"theirs": take}
