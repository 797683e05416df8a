"""The redactor: the scan's rule in Python, applied to stored JSON (states, payloads, requests).

What the scan counts (erasure.places.column_place) the redactor replaces: long texts (and names in
scripts without spaces) anywhere inside a string, short ones as whole words, the id as a whole
token, case-insensitively. A string that holds one becomes "[erased]"; an id becomes a keyed
pseudonym; an object key that is the subject's data is replaced without losing its entry.
"""

from __future__ import annotations

from typing import Any

from core.digests import erased_id
from erasure.matching import (
    CODE,
    IDENTIFIER_SUBSTRING_CHARS,
    MIN_VALUE_CHARS,
    id_pattern,
    matched_inside,
    value_pattern,
)
from runs.conversations.erasure import ERASED


class Redactor:
    def __init__(self, subject_id: str, values: tuple[str, ...]):
        texts = [v for v in values if len(v) >= MIN_VALUE_CHARS]
        self.texts = {v.lower() for v in texts}
        self.needles = [v.lower() for v in texts if matched_inside(v)]
        self.words = value_pattern([v for v in texts if not matched_inside(v)])
        # The id as a whole token ("cust-100" never inside "cust-1000"); a short one as a whole value.
        self.id_token = id_pattern(subject_id) if len(subject_id) >= IDENTIFIER_SUBSTRING_CHARS else None
        self.subject_id = subject_id.lower()

    def hit(self, text: str) -> bool:
        low = text.lower()
        return (
            any(n in low for n in self.needles)
            or (self.words is not None and self.words.search(text) is not None)
            or (self.id_token.search(text) is not None if self.id_token else low == self.subject_id)
        )

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return ERASED if self.hit(value) else value
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            items = [(k, self.ident(v) if k == "client_message_id" else self(v)) for k, v in value.items()]
            gone = {k for k, _ in items if isinstance(k, str) and self.key_hit(k)}
            taken = {k for k, _ in items if k not in gone}
            redacted: dict[str, Any] = {}
            for key, item in items:
                if key in gone:  # "[erased]", or "[erased] 2" ... past every key the object keeps
                    key = next(k for n in range(1, len(items) + 2) if (k := _nth(n)) not in taken)
                    taken.add(key)
                redacted[key] = item
            return redacted
        return value

    def key_hit(self, key: str) -> bool:
        """A key can be the subject's data too ({"Zofia": "sister"}, an object keyed by their id). A
        key that is a machine code ("delivered_at") is the state's shape: only the subject's id, or
        a key that is one of the texts whole ("zofia"), makes it theirs."""
        if not CODE.fullmatch(key):
            return self.hit(key)
        low = key.lower()
        return low in self.texts or (
            self.id_token.search(key) is not None if self.id_token else low == self.subject_id
        )

    def ident(self, value: Any) -> Any:
        return erased_id(value) if isinstance(value, str) and self.hit(value) else self(value)


def _nth(n: int) -> str:
    """The n-th erased key of an object: "[erased]", "[erased] 2", ..."""
    return ERASED if n == 1 else f"{ERASED} {n}"
