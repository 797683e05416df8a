"""File memory: write_memory for steps and agents, and MEMORY.md, a subject's current claims as a
file that can be read, edited and written back (an edit becomes claims with the editor as source).

MEMORY.md is a view of memory items, never stored: erasing the items erases it. Its line format:

    # MEMORY.md of <subject>            (headings, blank lines: ignored when read back)
    ## <namespace>
    - <namespace>/<key>: <JSON value>  <!-- id=<memory id>; source=...; consent=... -->

namespace and key are percent-encoded where they hold "/", ":", "%", "<", ">" or white space; the
value is JSON with "<", ">" and "&" written as \\u escapes (no markup can hide in it). A line without
an id is a new claim; a line whose value changed supersedes its claim; a claim whose line is gone is
invalidated; a line's `consent=` is the basis its claim is kept with (`<!-- consent=explicit -->` on
a new line); anything else on a line is an error (with its line number, nothing stored).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from django.db import transaction
from django.utils import timezone

from core.digests import MAX_JSON_DEPTH, canonical_json, json_depth_over
from core.errors import ApplicationError, InvalidInput
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.consent import CONSENT_BASES
from memory.erasure import tombstoned_among
from memory.models import MemoryItem
from memory.poisoning.models import HeldClaim
from memory.policy import Admission, claim_admit
from memory.selectors import memory_recall
from memory.services import (
    Claim,
    ClaimErased,
    claim_waiting,
    memory_remember,
    memory_write_admitted,
    subject_check,
    waiting_error,
)

_LINE = re.compile(
    r"^- (?P<namespace>[^/\s]+)/(?P<key>[^:\s]+): (?P<value>.+?)(?:  <!-- (?P<meta>[^<>]*?) -->)?$"
)
_ID = re.compile(r"[0-9a-f-]{36}")
TEXT_KEY = "note"  # write_memory(text=...) keeps free text under notes/note-<digest of the text>
# What one MEMORY.md write takes: a file a person reads and a first turn loads, not a bulk import
# (the API's memory/items/ is that). Larger edits are refused whole (413), before any line is read.
MEMORY_MD_MAX_BYTES = 256 * 1024  # a thousand rendered lines with their comments fit
MEMORY_MD_MAX_CLAIMS = 1000


class MemoryFileTooLarge(ApplicationError):
    code = "memory_md_too_large"
    http_status = 413


# What would break a line (its separators, the id comment, whitespace, control characters) is
# percent-encoded; every other character, Cyrillic and Chinese included, stays readable.
_SPECIAL = re.compile(r"[/:%<>\s\x00-\x1f\x7f-\x9f]")


def _name(text: str) -> str:
    return _SPECIAL.sub(lambda m: quote(m.group(0), safe=""), text)


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _source(item: MemoryItem) -> str:
    p = item.provenance
    where = f"{p.get('source_type')}:{p.get('source_id')}"
    if p.get("event_seq") is not None:
        where += f"#{p['event_seq']}"
    return quote(where, safe=":#")


def memory_md_lines(
    *, tenant: Tenant, subject_id: str, pinned: tuple[str, ...] = ()
) -> list[tuple[str, str | None]]:
    """(line, memory id or None) of the subject's MEMORY.md, pinned namespaces first."""
    items = memory_recall(tenant=tenant, subject_id=subject_id)
    items.sort(key=lambda m: (m.namespace not in pinned, m.namespace, m.key))
    lines: list[tuple[str, str | None]] = [(f"# MEMORY.md of {_name(subject_id)}", None)]
    namespace = None
    for m in items:
        if m.namespace != namespace:
            namespace = m.namespace
            lines += [("", None), (f"## {_name(namespace)}", None)]
        lines.append(
            (
                f"- {_name(m.namespace)}/{_name(m.key)}: {_json(m.value)}  <!-- id={m.memory_id}; "
                f"source={_source(m)}; consent={m.consent_basis or 'unknown'} -->",
                str(m.memory_id),
            )
        )
    return lines


def memory_md_render(*, tenant: Tenant, subject_id: str) -> str:
    return "\n".join(line for line, _ in memory_md_lines(tenant=tenant, subject_id=subject_id)) + "\n"


@dataclass(frozen=True)
class MemoryLine:
    number: int
    namespace: str
    key: str
    value: Any
    memory_id: str | None
    consent_basis: str | None = None  # the line's own `consent=`; None: it names none ("unknown")


def _meta(text: str | None) -> tuple[str | None, str | None]:
    """(memory id, consent basis) of a line's `<!-- id=...; source=...; consent=... -->`; the source
    is shown, never read back (a write's source is its editor). ValueError naming what is wrong."""
    memory_id = basis = None
    for part in (text or "").split(";"):
        name, _, given = part.strip().partition("=")
        if name == "id" and _ID.fullmatch(given):
            memory_id = given
        elif name == "consent" and given in (*CONSENT_BASES, "unknown"):
            basis = None if given == "unknown" else given
        elif name != "source" and part.strip():
            raise ValueError(
                f"the comment holds {part.strip()[:40]!r}: it takes id=<memory id>, source=... and "
                f"consent=<{' | '.join(CONSENT_BASES)}>"
            )
    return memory_id, basis


def memory_md_parse(text: str) -> list[MemoryLine]:
    """The claim lines of an edited MEMORY.md; InvalidInput naming every bad line."""
    found: list[MemoryLine] = []
    errors: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            errors.append({"line": number, "error": "not a claim line: - namespace/key: <JSON value>"})
            continue
        try:
            memory_id, basis = _meta(match["meta"])
        except ValueError as exc:
            errors.append({"line": number, "error": str(exc)})
            continue
        try:
            value = json.loads(match["value"])
        except ValueError:
            errors.append({"line": number, "error": "the value is not JSON (a text needs quotes)"})
            continue
        except RecursionError:
            value = None
            deep = True
        else:
            deep = json_depth_over(value)
        if deep:
            errors.append({"line": number, "error": f"the value nests deeper than {MAX_JSON_DEPTH} levels"})
            continue
        namespace, key = unquote(match["namespace"]), unquote(match["key"])
        if (namespace, key) in seen:
            errors.append(
                {"line": number, "error": f"{namespace}/{key} is already on line {seen[namespace, key]}"}
            )
            continue
        seen[namespace, key] = number
        found.append(MemoryLine(number, namespace, key, value, memory_id, basis))
    if errors:
        raise InvalidInput(
            f"MEMORY.md has {len(errors)} bad line(s); nothing was stored",
            code="invalid_memory_md",
            details={"lines": errors},
        )
    return found


@dataclass
class MemoryEdit:
    added: int = 0
    superseded: int = 0
    invalidated: int = 0
    unchanged: int = 0
    held: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "superseded": self.superseded,
            "invalidated": self.invalidated,
            "unchanged": self.unchanged,
            "held": self.held,
        }


def _editor_provenance(editor: str, *, operator: bool) -> dict[str, Any]:
    return {
        "source_type": "operator" if operator else "import",
        "source_id": f"memory.md:{editor}",
        "source_version": None,
        "run_id": None,
        "event_seq": None,
        "validation_method": "operator_entered" if operator else "unvalidated",
    }


def memory_md_size_check(text: str) -> None:
    """MemoryFileTooLarge (413) for a file over MEMORY_MD_MAX_BYTES or MEMORY_MD_MAX_CLAIMS, told
    before any line is parsed."""
    size = len(text.encode("utf-8", "surrogatepass"))
    claims = sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))
    if size > MEMORY_MD_MAX_BYTES or claims > MEMORY_MD_MAX_CLAIMS:
        over = f"{size} bytes" if size > MEMORY_MD_MAX_BYTES else f"{claims} claim lines"
        raise MemoryFileTooLarge(
            f"MEMORY.md has {over}; at most {MEMORY_MD_MAX_BYTES} bytes and {MEMORY_MD_MAX_CLAIMS} claims "
            "are written back at once",
            details={
                "bytes": size,
                "claims": claims,
                "max_bytes": MEMORY_MD_MAX_BYTES,
                "max_claims": MEMORY_MD_MAX_CLAIMS,
            },
        )


def memory_md_apply(
    *,
    tenant: Tenant,
    subject_id: str,
    text: str,
    editor: str,
    operator: bool = False,
    consent_basis: str | None = None,
) -> MemoryEdit:
    """Turn an edited MEMORY.md into claims, all or nothing: changed values supersede their claim,
    removed lines invalidate theirs, new lines become claims (the editor their source), unchanged
    lines do nothing. operator: a person signed in with a role (trusted, not screened); else an API
    client. A line's basis is its own `consent=`, else `consent_basis` (what the editor stated for
    the file), else none: a line in a category or namespace whose policy needs a basis then waits
    for the subject's confirmation (in `held`), never kept on a basis nobody gave. The whole edit
    takes a fixed number of queries however many lines it has."""
    if consent_basis is not None and consent_basis not in CONSENT_BASES:
        raise InvalidInput(
            f"consent_basis must be one of {', '.join(CONSENT_BASES)}", code="invalid_consent_basis"
        )
    subject_check(subject_id)
    memory_md_size_check(text)
    lines = memory_md_parse(text)
    if len(lines) > MEMORY_MD_MAX_CLAIMS:
        raise MemoryFileTooLarge(
            f"MEMORY.md has {len(lines)} claims; at most {MEMORY_MD_MAX_CLAIMS} are written back at once",
            details={
                "claims": len(lines),
                "max_claims": MEMORY_MD_MAX_CLAIMS,
                "max_bytes": MEMORY_MD_MAX_BYTES,
            },
        )
    current = {str(m.memory_id): m for m in memory_recall(tenant=tenant, subject_id=subject_id)}
    provenance = _editor_provenance(editor, operator=operator)
    errors: list[dict[str, Any]] = []
    edit = MemoryEdit()
    writes: list[tuple[MemoryLine, Claim, Admission]] = []
    for line in lines:
        item = current.get(line.memory_id) if line.memory_id else None
        if line.memory_id and item is None:
            errors.append(
                {"line": line.number, "error": f"{line.memory_id} is not a current claim of this subject"}
            )
            continue
        if item is not None and (item.namespace, item.key) != (line.namespace, line.key):
            errors.append(
                {
                    "line": line.number,
                    "error": "a line with an id keeps its namespace/key (drop the id to add)",
                }
            )
            continue
        if item is not None and canonical_json(item.value) == canonical_json(line.value):
            edit.unchanged += 1
            continue
        claim = Claim(
            line.namespace,
            line.key,
            line.value,
            provenance,
            consent_basis=line.consent_basis or consent_basis,
        )
        try:
            admission = claim_admit(
                tenant=tenant,
                namespace=claim.namespace,
                key=claim.key,
                value=claim.value,
                provenance=provenance,
                consent_basis=claim.consent_basis,
            )
        except ApplicationError as exc:
            errors.append({"line": line.number, "code": exc.code, "error": exc.message})
            continue
        writes.append((line, claim, admission))
    if errors:
        raise InvalidInput(
            f"MEMORY.md has {len(errors)} bad line(s); nothing was stored",
            code="invalid_memory_md",
            details={"lines": errors},
        )
    kept = {line.memory_id for line in lines if line.memory_id}
    removed = [item.pk for memory_id, item in current.items() if memory_id not in kept]
    with transaction.atomic(), tenant_scope(tenant.tenant_id):
        if removed:
            edit.invalidated = MemoryItem.objects.filter(pk__in=removed, invalidated_at__isnull=True).update(
                invalidated_at=timezone.now(), invalidation_reason=f"removed from MEMORY.md by {editor}"[:500]
            )
        erased = tombstoned_among(
            tenant_id=tenant.tenant_id,
            subject_id=subject_id,
            claims=[(c.namespace, c.key, c.value, c.provenance) for _, c, _ in writes],
        )
        if erased:
            line, claim, _ = writes[erased[0]]
            raise ClaimErased(
                f"line {line.number}: {claim.namespace}/{claim.key} of this subject was erased at their "
                "request; it is not kept again",
                details={"line": line.number},
            )
        waiting = [
            (line, claim_waiting(tenant=tenant, subject_id=subject_id, claim=claim, admission=admission))
            for line, claim, admission in writes
            if admission.waits
        ]
        HeldClaim.objects.bulk_create([held for _, held in waiting])
        for line, held in waiting:
            answer = waiting_error(held)
            edit.held.append({"line": line.number, "code": answer.code, **answer.details})
        now = [(line, claim, admission) for line, claim, admission in writes if not admission.waits]
        written = memory_write_admitted(
            tenant=tenant, subject_id=subject_id, claims=[(c, a) for _, c, a in now], tombstones_checked=True
        )
        for (line, _, _), (_, new) in zip(now, written, strict=True):
            if not new:
                edit.unchanged += 1
            elif line.memory_id:
                edit.superseded += 1
            else:
                edit.added += 1
    return edit


def write_memory(
    *,
    tenant: Tenant,
    subject_id: str,
    source: str,
    consent_basis: str,
    text: str | None = None,
    namespace: str | None = None,
    key: str | None = None,
    value: Any = None,
    source_type: str = "tool_result",
    run_id: str | None = None,
    event_seq: int | None = None,
) -> MemoryItem:
    """The write_memory tool of workflows and agents: keep one claim (namespace/key/value), or a free
    text note (notes/<n>), with `source` as its provenance. Screened like every write."""
    if text is not None:
        if namespace is not None or key is not None or value is not None:
            raise InvalidInput("give either text or namespace, key and value", code="invalid_memory_write")
        if not isinstance(text, str) or not text.strip() or len(text) > 4000:
            raise InvalidInput("text must be 1 to 4000 characters", code="invalid_memory_write")
        # The key is the text's digest: the same note written again (a retried step) is one claim.
        namespace, value = "notes", text.strip()
        key = f"{TEXT_KEY}-{hashlib.sha256(value.encode()).hexdigest()[:12]}"
    elif namespace is None or key is None or value is None:
        raise InvalidInput("give either text or namespace, key and value", code="invalid_memory_write")
    if not isinstance(source, str) or not 0 < len(source) <= 500:
        raise InvalidInput("source must name who writes (1 to 500 characters)", code="invalid_provenance")
    return memory_remember(
        tenant=tenant,
        subject_id=subject_id,
        namespace=namespace,
        key=key,
        value=value,
        provenance={
            "source_type": source_type,
            "source_id": source,
            "source_version": None,
            "run_id": run_id,
            "event_seq": event_seq,
            "validation_method": "unvalidated",
        },
        consent_basis=consent_basis,
    )
