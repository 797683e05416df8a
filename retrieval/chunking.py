"""Sections -> bounded chunks with stable ids and digests: the same sections give the same chunks anywhere.

Words are whitespace-separated tokens, except that each CJK ideograph or kana (and each CJK full stop,
exclamation or question mark) is a word of its own, so text written without spaces is bounded too.
Hangul is written with spaces and is counted like Latin text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from core.digests import sha256_digest
from core.errors import InvalidInput
from memory.postings import CJK_CHARS
from retrieval.sources import DocumentTooLarge, Section

CHUNKER_VERSION = "chunker-v1"  # bump when the rules change: chunk ids and digests would change
MAX_DOCUMENT_ID_LENGTH = 200

_CJK = CJK_CHARS
_CJK_SENTENCE_MARKS = "\u3002\uff01\uff1f"  # 。！？
_SENTENCE_MARKS = ".!?" + _CJK_SENTENCE_MARKS
_WORD = re.compile(f"[{_CJK}{_CJK_SENTENCE_MARKS}]|[^\\s{_CJK}{_CJK_SENTENCE_MARKS}]+")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


@dataclass(frozen=True)
class ChunkText:
    chunk_id: str  # "{document_id}:{section label}:c{ordinal}", e.g. "policy-42:p7:c2"
    section: str
    ordinal: int  # 1-based within the section
    text: str
    content_digest: str


class InvalidDocumentId(InvalidInput):
    code = "invalid_document_id"


class InvalidSectionLabel(InvalidInput):
    code = "invalid_section_label"


class InvalidChunkLimits(InvalidInput):
    code = "invalid_chunk_limits"


def text_words(text: str) -> list[str]:
    """The words chunking counts, in order (see the module docstring)."""
    return _WORD.findall(text)


def chunk_sections(
    *,
    document_id: str,
    sections: list[Section],
    max_words: int = 180,
    overlap_words: int = 0,
    max_chunks: int = 5000,
) -> list[ChunkText]:
    """Chunks of at most max_words words, in section order; ordinals restart at 1 in each section.

    Whole paragraphs are packed while they fit; a longer paragraph is cut at sentence ends, and a
    longer sentence into max_words windows. With overlap_words, a chunk after a section's first
    repeats the last overlap_words words of the chunk before (and carries fewer new ones).
    """
    _check_document_id(document_id)
    _check_labels(sections)
    if max_words < 1 or not 0 <= overlap_words < max_words or max_chunks < 1:
        raise InvalidChunkLimits(
            f"chunk limits need max_words >= 1, 0 <= overlap_words < max_words and max_chunks >= 1 "
            f"(got {max_words}, {overlap_words}, {max_chunks})"
        )
    chunks: list[ChunkText] = []
    for section in sections:
        for ordinal, text in enumerate(_section_chunks(section.text, max_words, overlap_words), start=1):
            if len(chunks) == max_chunks:
                raise DocumentTooLarge(
                    f"the document makes more than {max_chunks} chunks of up to {max_words} words; "
                    "split it into smaller documents",
                    details={"max_chunks": max_chunks, "max_words": max_words},
                )
            chunks.append(
                ChunkText(
                    chunk_id=f"{document_id}:{section.label}:c{ordinal}",
                    section=section.label,
                    ordinal=ordinal,
                    text=text,
                    content_digest=sha256_digest(text),
                )
            )
    return chunks


def _check_document_id(document_id: str) -> None:
    if not document_id or len(document_id) > MAX_DOCUMENT_ID_LENGTH:
        raise InvalidDocumentId(
            f"a document id needs 1 to {MAX_DOCUMENT_ID_LENGTH} characters (got {len(document_id)})"
        )
    if any(_separates(char) for char in document_id):
        raise InvalidDocumentId(
            f"document id {document_id!r} contains ':', whitespace or a control character, "
            "which would make its chunk ids ambiguous"
        )


def _check_labels(sections: list[Section]) -> None:
    seen: set[str] = set()
    for section in sections:
        label = section.label
        if not label or any(_separates(char) for char in label) or label in seen:
            raise InvalidSectionLabel(
                f"section label {label!r} is empty, repeated or contains ':', whitespace or a control "
                "character, which would make its chunk ids ambiguous"
            )
        seen.add(label)


def _separates(char: str) -> bool:
    return char == ":" or char.isspace() or unicodedata.category(char) in ("Cc", "Cs")


def _section_chunks(text: str, max_words: int, overlap_words: int) -> list[str]:
    """The texts of a section's chunks; each is cut from the section between words."""
    spans: list[tuple[int, int]] = []  # (start, end) of every word in the text
    paragraph_of: list[int] = []  # the paragraph each word belongs to
    units: list[tuple[int, int]] = []  # [first, last) word ranges that each fit in a chunk
    budget = max_words - overlap_words
    start = 0
    for paragraph, separator in enumerate([*_BLANK_LINE.finditer(text), None]):
        end = separator.start() if separator else len(text)
        first = len(spans)
        spans.extend(match.span() for match in _WORD.finditer(text, start, end))
        paragraph_of.extend([paragraph] * (len(spans) - first))
        units.extend(_paragraph_units(text, spans, first, len(spans), budget))
        start = separator.end() if separator else end

    ranges: list[tuple[int, int]] = []
    for first, last in units:  # greedy: a unit joins the open chunk while the chunk stays in budget
        if ranges and last - ranges[-1][0] <= budget:
            ranges[-1] = (ranges[-1][0], last)
        else:
            ranges.append((first, last))

    texts: list[str] = []
    for index, (first, last) in enumerate(ranges):
        if index and overlap_words:
            first -= min(overlap_words, ranges[index - 1][1] - ranges[index - 1][0])
        pieces: list[str] = []
        word = first
        while word < last:  # one piece per paragraph the range touches, joined by a blank line
            paragraph_last = word
            while paragraph_last + 1 < last and paragraph_of[paragraph_last + 1] == paragraph_of[word]:
                paragraph_last += 1
            pieces.append(text[spans[word][0] : spans[paragraph_last][1]])
            word = paragraph_last + 1
        texts.append("\n\n".join(pieces))
    return texts


def _paragraph_units(
    text: str, spans: list[tuple[int, int]], first: int, last: int, budget: int
) -> list[tuple[int, int]]:
    """The paragraph whole if it fits; else its sentences, and a too long sentence in windows."""
    if last - first <= budget:
        return [(first, last)] if last > first else []
    units: list[tuple[int, int]] = []
    sentence = first
    for word in range(first, last):
        if text[spans[word][1] - 1] in _SENTENCE_MARKS or word == last - 1:
            units.extend(
                (window, min(window + budget, word + 1)) for window in range(sentence, word + 1, budget)
            )
            sentence = word + 1
    return units
