"""What a procedure keeps of a request and of its tool calls: words and shapes, never values.

A request's words are its plain lowercase words (no word holding a digit, an @ or a slash, no
capitalised word inside a sentence, no word of a sensitive trait), so order ids, e-mail addresses
and names stay out. A tool call's arguments become their types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from core.digests import json_digest
from memory.extraction import _GUARDS  # the sensitive words fact extraction refuses to keep

MAX_WORDS = 8
MAX_STEPS = 20
MAX_ARGUMENTS = 20
_WORD = re.compile(r"^[^\W\d_]{3,24}$")
_SENTENCE_END = (".", "!", "?", "。", "！", "？")
STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "you",
        "your",
        "my",
        "mine",
        "our",
        "can",
        "could",
        "would",
        "will",
        "please",
        "with",
        "this",
        "that",
        "have",
        "has",
        "had",
        "was",
        "were",
        "are",
        "is",
        "not",
        "but",
        "from",
        "they",
        "them",
        "then",
        "than",
        "what",
        "when",
        "where",
        "which",
        "who",
        "how",
        "why",
        "want",
        "wants",
        "need",
        "needs",
        "just",
        "also",
        "about",
        "into",
        "out",
        "get",
        "got",
        "its",
        "it's",
        "i'm",
        "hello",
        "hi",
        "thanks",
        "thank",
    ]
)


def request_words(text: str) -> list[str]:
    """The plain words of a request, in order, at most MAX_WORDS, without personal values."""
    words: list[str] = []
    sentence_start = True
    for token in (text or "").split():
        bare = token.strip(".,;:!?\"'()[]{}«»“”‘’…")
        starts = sentence_start
        sentence_start = token.endswith(_SENTENCE_END)
        if any(c.isdigit() for c in token) or "@" in token or "/" in token or "-" in bare:
            continue
        if not _WORD.match(bare) or (bare[:1].isupper() and not starts):
            continue
        word = bare.lower()
        if word in STOPWORDS or word in words or _GUARDS["sensitive"].search(word):
            continue
        words.append(word)
        if len(words) == MAX_WORDS:
            break
    return words


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def argument_shape(arguments: Any) -> dict[str, str]:
    """{argument: type} of a tool call's arguments (their names as the tool's contract gives them)."""
    if not isinstance(arguments, dict):
        return {}
    return {str(k)[:64]: _type(v) for k, v in sorted(arguments.items())[:MAX_ARGUMENTS]}


def step_of(tool: str, arguments: Any) -> dict[str, Any]:
    return {"tool": str(tool)[:100], "arguments": argument_shape(arguments)}


def steps_digest(*, workflow_name: str, steps: Sequence[dict[str, Any]]) -> str:
    return json_digest({"workflow": workflow_name, "steps": list(steps)})


def steps_name(steps: Sequence[dict[str, Any]], words: Iterable[str]) -> str:
    tools = " → ".join(s["tool"] for s in steps)
    said = " ".join(list(words)[:4])
    return f"{said}: {tools}" if said else tools


def step_text(number: int, step: dict[str, Any]) -> str:
    arguments = ", ".join(f"{k}: {v}" for k, v in sorted((step.get("arguments") or {}).items()))
    return f"{number}. {step.get('tool')}({arguments})"


def trigger_clean(trigger: Any) -> list[str]:
    """A person's trigger (words, or a text of words) as lowercase words; ValueError if unusable."""
    text = " ".join(trigger) if isinstance(trigger, list) else trigger
    if not isinstance(text, str) or (
        isinstance(trigger, list) and not all(isinstance(w, str) for w in trigger)
    ):
        raise ValueError("the trigger is a text of words, or a list of words")
    words = [w.lower() for w in re.findall(r"[^\W\d_]{2,40}", text)]
    unique = list(dict.fromkeys(words))[: MAX_WORDS * 2]
    if not unique:
        raise ValueError("the trigger needs at least one word of two letters or more")
    return unique
