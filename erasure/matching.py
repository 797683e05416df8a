"""What a subject's data looks like to the scan and to the erasers: the request's scope and the rules
that match its id and texts, in SQL (the scan, an eraser's WHERE) and in Python (a redactor), alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

# A value (a message, a note, a memory value) is searched outside the subject's own rows only when it
# is distinctive: at least DISTINCTIVE_CHARS long, or at least DISTINCTIVE_WITH_DIGIT_CHARS long with a
# digit in it ("Baker Street 221b"). "english", "refund please" or "new user message" are not.
DISTINCTIVE_CHARS = 24
DISTINCTIVE_WITH_DIGIT_CHARS = 12
# A subject id this long is searched as a substring tenant-wide; a shorter one ("a") only as a
# whole value (a column equal to it, or a JSON string equal to it): as a substring it is everywhere.
IDENTIFIER_SUBSTRING_CHARS = 6
# Texts shorter than this are not searched at all: one character carries no information on its own,
# but two can be a name (王芳), three too (Ada, Яна).
MIN_VALUE_CHARS = 2
# A text found in a run's free text (a note, a reason, a message) counts as the subject's from this
# length, or from MIN_VALUE_CHARS when it holds a letter outside ASCII ("ok" and "no" are answers, not
# data; 王芳 is a name). What Keeper keeps about the person (memory values, held claims) counts from
# MIN_VALUE_CHARS whatever its script.
FREE_TEXT_MIN_CHARS = 4
# A value shorter than this ("english", "fine", "Ada") is matched only as a whole word, never inside a
# longer word ("refined", "Adam"): the sentence it came from is searched as a value of its own. Scripts
# written without spaces (Chinese, Japanese, Korean) have no words to match whole: a value made of
# their characters is matched inside longer text from MIN_VALUE_CHARS (王芳 in 客户王芳要求退款).
VALUE_SUBSTRING_CHARS = 8
# A machine code ("awaiting_input", "conversation", "delivered"): what a workflow, status or reason
# field holds, nobody's personal data.
CODE = re.compile(r"[a-z][a-z0-9_.:-]*")
_UNSPACED_CHARS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_UNSPACED = re.compile(f"[{_UNSPACED_CHARS}]+")


def free_text_value(text: str) -> bool:
    """Whether a text found in a run's free text is searched as the subject's (see FREE_TEXT_MIN_CHARS)."""
    return len(text) >= FREE_TEXT_MIN_CHARS or (len(text) >= MIN_VALUE_CHARS and not text.isascii())


def matched_inside(text: str) -> bool:
    """Whether a value is matched inside longer text (else only as a whole value)."""
    return len(text) >= VALUE_SUBSTRING_CHARS or (
        len(text) >= MIN_VALUE_CHARS and _UNSPACED.fullmatch(text) is not None
    )


@dataclass(frozen=True)
class Scope:
    """What one erasure covers, collected BEFORE anything is erased (the scan never trusts the erasers)."""

    tenant_id: UUID
    subject_id: str
    run_ids: tuple[UUID, ...] = ()  # the subject's runs, their forks and rewinds
    values: tuple[str, ...] = ()  # texts the request covers: memory values, messages, notes, reasons...
    # Texts that are the subject's in their own rows only, never searched elsewhere: an e-mail address
    # in their run that another customer's run holds too (a cc, a workflow's noreply sender).
    own_values: tuple[str, ...] = ()
    session_keys: tuple[bytes, ...] = ()  # the Redis windows of those runs
    artifact_digests: tuple[str, ...] = ()  # stored blobs only these runs refer to (core.artifacts)


# An e-mail address names one person whatever its length ("ivo.brandt@example.com" is 22 characters
# and has no digit, yet it is as distinctive as a long text).
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def distinctive(text: str) -> bool:
    return (
        len(text) >= DISTINCTIVE_CHARS
        or (len(text) >= DISTINCTIVE_WITH_DIGIT_CHARS and any(c.isdigit() for c in text))
        or EMAIL.fullmatch(text.strip()) is not None
    )


def holds_subject(text: str, scope: Scope) -> bool:
    """Whether a name, a label or a URL holds the subject's id (a whole token, a short id the whole
    text) or one of their distinctive texts: as the scan counts it in a row that is not the subject's."""
    low = text.lower()
    subject = scope.subject_id
    if len(subject) >= IDENTIFIER_SUBSTRING_CHARS:
        found = id_pattern(subject).search(text) is not None
    else:
        found = low == subject.lower()
    return found or any(v.lower() in low for v in scope.values if distinctive(v))


def subject_condition(
    column: str, subject_id: str, *, json: bool = False, values: tuple[str, ...] = ()
) -> tuple[str, list[Any]]:
    """holds_subject's rule in SQL (and its parameters), for an eraser to find the rows it rewrites: the
    id as a whole token from IDENTIFIER_SUBSTRING_CHARS, else the whole value; or one of the subject's
    distinctive texts (a principal named by their e-mail address)."""
    text = f"{column}::text" if json else column
    params: list[Any]
    if len(subject_id) >= IDENTIFIER_SUBSTRING_CHARS:
        condition, params = f"{text} ~* %s", [id_regex_of(subject_id)]
    elif json:  # the id as a whole JSON string; its % and _ are the id's, not patterns (erasing "K_17"
        # must not touch a search that found document "K-17")
        condition, params = f"{text} ILIKE %s", [like_pattern('"' + json_text(subject_id) + '"')]
    else:
        condition, params = f"lower({text}) = lower(%s)", [subject_id]
    likes = [like_pattern(v) for v in values if distinctive(v)]
    if likes:
        condition, params = f"({condition} OR {text} ILIKE ANY(%s))", [*params, likes]
    return condition, params


def like_pattern(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _regex_literal(text: str) -> str:
    """The text as a literal in a PostgreSQL regular expression (a backslash before ASCII punctuation
    is always literal there)."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def id_regex_of(text: str) -> str:
    """A PostgreSQL regular expression for the subject id as a whole token: "cust-100" is found in
    "cust-100:m1" but never inside "cust-1000" (another subject's id). Non-alphanumeric characters
    are escaped (a backslash before one is always literal in PostgreSQL's regular expressions)."""
    return f"(^|[^0-9A-Za-z]){_regex_literal(text)}($|[^0-9A-Za-z])"


def id_pattern(text: str) -> re.Pattern[str]:
    """The same whole-token rule in Python (the redactor must match exactly what the scan counts)."""
    return re.compile(r"(?<![0-9A-Za-z])" + re.escape(text) + r"(?![0-9A-Za-z])", re.IGNORECASE)


def value_regex_of(text: str) -> str:
    """A short value as a whole word of any script ("Ada" in "call Ada back", never in "Adam"; "Яна"
    never in "Янаев"): no letter, digit or underscore on either side, as the database's character
    classes say (Unicode letters under a UTF-8 locale, as Python's), except a character of a script
    written without spaces ("Ada" in 客户Ada要求退款)."""
    edge = f"\\W|[{_UNSPACED_CHARS}]"
    return f"(^|{edge}){_regex_literal(text)}($|{edge})"


def value_pattern(texts: list[str]) -> re.Pattern[str] | None:
    """value_regex_of's rule in Python, for all the texts in one expression (None for none)."""
    if not texts:
        return None
    words = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    inside_word = f"[^\\W{_UNSPACED_CHARS}]"  # a letter, digit or underscore of a spaced script
    return re.compile(rf"(?<!{inside_word})(?:{words})(?!{inside_word})", re.IGNORECASE)


def json_text(text: str) -> str:
    """How a string appears inside jsonb's text form (quotes, backslashes, controls escaped)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]
