"""How the console shows values: money in major units, countdowns, short digests, bounded and
pretty JSON, payload previews, state diffs, claim chains and erasure receipts. Pure functions (no
database); the template filters in console/templatetags/console_display.py wrap the simple ones."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.urls import reverse
from django.utils import timezone

from console.models import AuditEntry
from erasure.models import ErasureRequest
from erasure.registry import erasers
from memory.models import PROVENANCE_KEYS, MemoryItem
from runs.kernel.models import AgentEvent, Approval, ToolOperation

# ISO 4217 currencies without two minor digits; every other code is shown with two.
_MINOR_DIGITS = {
    **dict.fromkeys(
        (
            "BIF",
            "CLP",
            "DJF",
            "GNF",
            "ISK",
            "JPY",
            "KMF",
            "KRW",
            "PYG",
            "RWF",
            "UGX",
            "VND",
            "VUV",
            "XAF",
            "XOF",
            "XPF",
        ),
        0,
    ),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}


def money_major(amount_minor: Any, currency: Any) -> str:
    """2500 EUR minor units -> "25.00 EUR"; anything that is not a whole number is flagged, shortened."""
    code = clip(str(currency or ""), 20)
    if not isinstance(amount_minor, int) or isinstance(amount_minor, bool):
        shown = json.dumps(bounded(amount_minor, 2), ensure_ascii=False, default=str)
        return f"not a whole amount: {clip(shown, 60)} {code}".strip()
    digits = _MINOR_DIGITS.get(code, 2)
    # Integer arithmetic, exact at any size (Decimal's context kept 28 digits and rounded the rest).
    whole, part = divmod(abs(amount_minor), 10**digits)
    shown = f"{'-' if amount_minor < 0 else ''}{whole:,}" + (f".{part:0{digits}d}" if digits else "")
    return f"{shown} {code}".strip()


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _span(seconds: int) -> str:
    """ "23 h 59 min", "3 d 4 h" or "5 min" for a number of seconds either way (minutes rounded down)."""
    minutes = abs(seconds) // 60
    days, hours, mins = minutes // 1440, minutes % 1440 // 60, minutes % 60
    return (
        f"{days} d {hours} h"
        if days >= 2
        else f"{minutes // 60} h {mins} min"
        if minutes >= 60
        else f"{mins} min"
    )


def countdown(expires_at: datetime, now: datetime) -> str:
    """ "expires in 23 h 59 min", or "expired 5 min ago" (minutes rounded down, never "in 0 min")."""
    seconds = int((expires_at - now).total_seconds())
    if seconds <= 0:
        return f"expired {_span(seconds)} ago"
    return f"expires in {_span(seconds)}" if seconds >= 60 else "expires in under a minute"


def wake_countdown(wake_at: datetime, now: datetime) -> str:
    """A sleeping run's timer: "wakes in 4 min", or "due 2 min ago" once the sweep should wake it."""
    seconds = int((wake_at - now).total_seconds())
    if seconds <= 0:
        return f"due {_span(seconds)} ago" if seconds <= -60 else "due now"
    return f"wakes in {_span(seconds)}" if seconds >= 60 else "wakes in under a minute"


def short_digest(digest: Any) -> str:
    return clip(str(digest or ""), 20)


def bounded(value: Any, depth: int = 8, items: int = 50) -> Any:
    """A copy of JSON-like `value` cut at `depth` levels and `items` entries per level, for display."""
    if isinstance(value, dict):
        if depth <= 0:
            return "{…}"
        cut = {str(k): bounded(v, depth - 1, items) for k, v in list(value.items())[:items]}
        return {**cut, "…": f"{len(value) - items} more"} if len(value) > items else cut
    if isinstance(value, list):
        if depth <= 0:
            return "[…]"
        kept = [bounded(v, depth - 1, items) for v in value[:items]]
        return [*kept, f"… {len(value) - items} more"] if len(value) > items else kept
    return value


def pretty_json(value: Any, limit: int = 6000) -> str:
    """Indented JSON of a bounded copy, cut at `limit` characters. The template escapes it."""
    text = json.dumps(bounded(value), indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


def text_list(value: Any) -> list[str]:
    """The decider's reasons (a JSON list of strings, normally) as strings to show one per line."""
    values = value if isinstance(value, list) else [value] if value not in (None, "", {}) else []
    return [v if isinstance(v, str) else json.dumps(bounded(v, 3), ensure_ascii=False) for v in values[:50]]


def refusal_of(event: AgentEvent) -> dict[str, Any]:
    payload = event.payload if isinstance(event.payload, dict) else {}
    checks = [c for c in payload.get("checks") or [] if isinstance(c, dict)]
    failed = next((c for c in checks if not c.get("ok")), {})
    return {
        "event": event,
        "check": failed,
        "checks": checks,
        "requested_by": payload.get("requested_by") or "",
    }


def approval_row(approval: Approval, now: datetime) -> dict[str, Any]:
    request = approval.request if isinstance(approval.request, dict) else {}
    return {
        "approval": approval,
        "run": approval.run,
        "order_id": request.get("order_id", ""),
        "amount": money_major(request.get("amount_minor"), request.get("currency")),
        "digest": approval.request_digest,
        "digest_short": short_digest(approval.request_digest),
        "reasons": text_list(approval.reasons),
        "countdown": countdown(approval.expires_at, now),
        "expired": approval.expires_at <= now,
    }


def operation_row(op: ToolOperation, lookup: AuditEntry | None) -> dict[str, Any]:
    """`lookup`: the newest lookup a person asked for from the console (console.selectors)."""
    history = [h for h in op.history or [] if isinstance(h, dict)]
    entry = lookup
    return {
        "op": op,
        "run": op.run,
        "last_move": history[-1] if history else {},
        "lookup": entry.details if entry is not None else None,
        "lookup_at": entry.at if entry else None,
        "lookup_by": entry.actor.removeprefix("user:") if entry else "",
    }


# --- run history -------------------------------------------------------------------------------

PAYLOAD_PREVIEW_CHARS = 3000
MAX_DIFF_ENTRIES = 500


def events_formatted(events: list[AgentEvent]) -> list[AgentEvent]:
    """Each event with `payload_text`, `time_text` and `time_iso` set (formatted here once: a 200-row
    page through template filters costs ~40 ms)."""
    for event in events:
        moment = timezone.localtime(event.created_at)
        event.payload_text = payload_preview(event.payload)  # type: ignore[attr-defined]
        event.time_text = moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"  # type: ignore[attr-defined]
        event.time_iso = moment.isoformat()  # type: ignore[attr-defined]
    return events


def _abbreviated(value: Any, depth: int = 0) -> Any:
    """Long strings, long lists and deep nesting cut short, so every top-level key stays visible."""
    if isinstance(value, str):
        return value if len(value) <= 400 else f"{value[:400]}… ({len(value) - 400:,} more characters)"
    if depth >= 6 and isinstance(value, dict | list) and value:
        return "{…}" if isinstance(value, dict) else "[…]"
    if isinstance(value, dict):
        return {str(k)[:200]: _abbreviated(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_abbreviated(v, depth + 1) for v in value[:30]] + (
            [f"… {len(value) - 30} more"] if len(value) > 30 else []
        )
    return value


def payload_preview(value: Any, limit: int = PAYLOAD_PREVIEW_CHARS) -> str:
    text = json.dumps(_abbreviated(value), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


@dataclass(frozen=True)
class DiffEntry:
    path: str
    change: str  # "added", "removed" or "changed"
    old: str
    new: str


def _path(parent: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return (
        f"{parent}.{key}"
        if str(key).isidentifier()
        else f"{parent}[{json.dumps(str(key), ensure_ascii=False)}]"
    )


def _show(value: Any, limit: int = 2000) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def json_diff(old: Any, new: Any, *, limit: int = MAX_DIFF_ENTRIES) -> tuple[list[DiffEntry], bool]:
    """Paths added, removed or changed from `old` to `new` (objects by key, lists by index), and
    whether the list was cut at `limit`. Iterative, so a 200-deep state cannot exhaust the stack."""
    entries: list[DiffEntry] = []
    stack: list[tuple[str, Any, Any]] = [("$", old, new)]
    while stack:
        if len(entries) >= limit:
            return entries, True
        path, a, b = stack.pop()
        if type(a) is type(b) and a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str, reverse=True):
                stack.append((_path(path, key), a.get(key, _MISSING), b.get(key, _MISSING)))
        elif isinstance(a, list) and isinstance(b, list):
            for index in reversed(range(max(len(a), len(b)))):
                stack.append(
                    (
                        _path(path, index),
                        a[index] if index < len(a) else _MISSING,
                        b[index] if index < len(b) else _MISSING,
                    )
                )
        elif a is _MISSING:
            entries.append(DiffEntry(path, "added", "", _show(b)))
        elif b is _MISSING:
            entries.append(DiffEntry(path, "removed", _show(a), ""))
        else:
            entries.append(DiffEntry(path, "changed", _show(a), _show(b)))
    return entries, False


_MISSING: Any = object()


# --- a subject's claims and erasures (the compliance screens) ------------------------------------

MAX_SHOWN_CHARS = 20_000  # per value: a megabyte of one claim must not make the page unusable
COMPACT_BEYOND_DEPTH = 12  # deeper JSON is shown on wrapped lines instead of a staircase of indents


def json_depth(value: Any) -> int:
    """Nesting depth, iteratively (a hostile value may be nested deeper than Python recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def readable_json(value: Any, *, limit: int = MAX_SHOWN_CHARS) -> str:
    """The value as readable JSON text for a <pre> (the template escapes it), cut at `limit`."""
    try:
        if json_depth(value) > COMPACT_BEYOND_DEPTH:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        else:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)
    except (RecursionError, TypeError, ValueError):
        return f"(a value nested {json_depth(value)} levels deep; too deep to show)"
    if len(text) > limit:
        return f"{text[:limit]}\n… ({len(text) - limit} more characters not shown, {len(text)} in all)"
    return text


@dataclass(frozen=True)
class Claim:
    item: MemoryItem
    state: str  # current, superseded, invalidated, expired, not yet valid
    value_text: str
    provenance: list[tuple[str, str, bool, str]]
    superseded_by: Any = None  # the memory_id of the newer claim in the chain


@dataclass(frozen=True)
class ClaimChain:
    """One key's claims linked by `supersedes`, newest first."""

    namespace: str
    key: str
    claims: list[Claim]


def claim_state(item: MemoryItem, now: datetime) -> str:
    if item.invalidated_at is not None:
        return "superseded" if item.invalidation_reason == "superseded" else "invalidated"
    if item.expires_at is not None and item.expires_at <= now:
        return "expired"
    if item.valid_from > now:
        return "not yet valid"
    return "current"


def _provenance(provenance: Any) -> list[tuple[str, str, bool, str]]:
    """(key, text, shown as a block, link) per provenance field, the standard fields first. JSON
    null reads "none"; a run id links to the run's page (the template prefers the run's row on the
    same page when it is there)."""
    if not isinstance(provenance, dict):
        provenance = {"provenance": provenance}
    keys = [k for k in PROVENANCE_KEYS if k in provenance] + sorted(set(provenance) - set(PROVENANCE_KEYS))
    rows = []
    for k in keys:
        v = provenance[k]
        text = "none" if v is None else v if isinstance(v, str) else readable_json(v, limit=2000)
        href = ""
        if k == "run_id" and isinstance(v, str):
            try:
                href = reverse("console:run_detail", args=[UUID(v)])
            except ValueError:
                href = ""
        rows.append((k, text, isinstance(v, dict | list), href))
    return rows


def claim_chains(items: list[MemoryItem], *, now: datetime) -> list[ClaimChain]:
    """Follow `supersedes` from each newest claim back to the first; chains sorted by scope."""
    by_id = {item.memory_id: item for item in items}
    newer = {item.supersedes_id: item.memory_id for item in items if item.supersedes_id in by_id}
    chains = []
    for head in (item for item in items if item.memory_id not in newer):
        claims: list[Claim] = []
        node: MemoryItem | None = head
        seen: set[UUID] = set()
        while node is not None and node.memory_id not in seen:
            seen.add(node.memory_id)
            claims.append(
                Claim(
                    item=node,
                    state=claim_state(node, now),
                    value_text=readable_json(node.value),
                    provenance=_provenance(node.provenance),
                    superseded_by=newer.get(node.memory_id),
                )
            )
            node = by_id.get(node.supersedes_id) if node.supersedes_id is not None else None
        chains.append(ClaimChain(namespace=head.namespace, key=head.key, claims=claims))
    return sorted(chains, key=lambda c: (c.namespace, c.key, -c.claims[0].item.created_at.timestamp()))


def erasure_steps(erasure: ErasureRequest) -> list[dict[str, Any]]:
    """The request's progress as steps (each registered eraser, in the order they run), each done or
    waiting."""
    progress = erasure.progress if isinstance(erasure.progress, dict) else {}
    names = [e.name for e in erasers() if e.erases]
    names += [name for name in progress if name not in names]
    return [
        {
            "name": name,
            "done": name in progress,
            "counts": sorted((progress.get(name) or {}).items())
            if isinstance(progress.get(name), dict)
            else [],
        }
        for name in names
    ]


def receipt_rows(receipt: dict[str, Any] | None) -> dict[str, Any]:
    """The receipt as rows for a template (JSON keys such as "items" would clash with dict methods)."""
    if not isinstance(receipt, dict):
        return {}
    counts: dict[str, Any] = receipt["counts"] if isinstance(receipt.get("counts"), dict) else {}
    scan: dict[str, Any] = receipt["final_scan"] if isinstance(receipt.get("final_scan"), dict) else {}
    places = [p for p in receipt.get("places") or [] if isinstance(p, dict)]  # receipts before places: none
    waiting = {e.name for e in erasers() if e.last}
    kept = {p.get("place") for p in places if p.get("erased_by") in waiting}
    return {
        "counts": sorted(counts.items()),
        "scan": sorted(scan.items()),
        "places": places,
        "remanence": receipt.get("remanence", ""),
        # The subject's memory is kept on purpose while anything else holds their data: said apart.
        "left_behind": sorted((k, v) for k, v in scan.items() if v and k not in kept),
        "memory_kept": sorted((k, v) for k, v in scan.items() if v and k in kept),
        "clean": receipt.get("clean") is True,
        "subject_digest": receipt.get("subject_digest", ""),
        "completed_at": receipt.get("completed_at", ""),
        "text": readable_json(receipt, limit=200_000),
    }


def plain_value(value: Any, limit: int = 300) -> str:
    """A value as a person reads it: text as it is, numbers and booleans as written, the rest short JSON."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return clip(value, limit)
    return clip(json.dumps(bounded(value, 3, 20), ensure_ascii=False, sort_keys=True), limit)


_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$")


def readable_fields(fields: Any) -> list[tuple[str, str]]:
    """A record's fields as a person reads them (a mapping, or (name, value) pairs): words for names,
    an amount in minor units beside a currency as money ("amount_minor" 12900 with "EUR" reads
    "amount: 129.00 EUR"), a timestamp in the console's one format (UTC, to the second)."""
    pairs = list(fields.items()) if isinstance(fields, dict) else [tuple(p) for p in fields or []]
    currency = next((v for k, v in pairs if k == "currency" and isinstance(v, str)), None)
    shown: list[tuple[str, str]] = []
    for key, value in pairs:
        name = str(key)
        if name.endswith("_minor") and currency and isinstance(value, int) and not isinstance(value, bool):
            shown.append((name.removesuffix("_minor").replace("_", " "), money_major(value, currency)))
        elif isinstance(value, str) and _ISO_TIME.match(value):
            try:
                at = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                shown.append((name.replace("_", " "), plain_value(value)))
            else:
                shown.append((name.replace("_", " "), at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")))
        else:
            shown.append((name.replace("_", " "), plain_value(value)))
    return shown
