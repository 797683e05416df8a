"""Uploaded document bytes -> normalized text sections (PDF pages, Markdown sections, plain text).

Pure functions: a source that cannot become text raises a narrow InvalidInput with a reason code.
"""

from __future__ import annotations

import io
import re
import unicodedata
from dataclasses import dataclass

import pypdf

from core.errors import InvalidInput

MEDIA_TYPES = ("text/plain", "text/markdown", "application/pdf")
MAX_PDF_PAGES = 2000

_EXTENSIONS = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".pdf": "application/pdf",
}
# Control characters a text file may carry; any other one (or NUL) hints at binary data.
_TEXT_CONTROLS = frozenset("\n\r\t\f")
_CONTROL_SHARE_LIMIT = 0.01

_BLANK_RUN = re.compile(r"\n{3,}")
# CommonMark: an ATX heading is 1-6 '#' after at most 3 spaces, then a space or the line's end.
_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?[ \t]*\Z")
_CLOSING_HASHES = re.compile(r"(?:\A|[ \t]+)#+[ \t]*\Z")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Section:
    """A part of a document with its own provenance label: "p7" (page 7) or "s3" (3rd section)."""

    label: str
    title: str
    text: str


class UnsupportedMediaType(InvalidInput):
    code = "unsupported_media_type"
    http_status = 415


class DocumentTooLarge(InvalidInput):
    code = "document_too_large"
    http_status = 413


class DocumentUnreadable(InvalidInput):
    code = "document_unreadable"
    http_status = 422


class DocumentEmpty(InvalidInput):
    code = "document_empty"
    http_status = 422


def media_type_guess(*, filename: str = "", declared: str = "") -> str:
    """The declared media type when it is one we read, else the one the file extension implies.

    Falls back to the declared type (without parameters), so that source_sections names it when it
    refuses it. A "; charset=..." parameter is dropped: every text is read as UTF-8.
    """
    essence = declared.split(";", 1)[0].strip().lower()
    if essence in MEDIA_TYPES:
        return essence
    dot = filename.rfind(".")
    if dot >= 0 and filename[dot:].lower() in _EXTENSIONS:
        return _EXTENSIONS[filename[dot:].lower()]
    return essence or "application/octet-stream"


def source_sections(*, data: bytes, media_type: str, max_bytes: int) -> list[Section]:
    """The document's sections with normalized text, in document order; never an empty list."""
    if media_type not in MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"documents of type {media_type or '(none)'!r} are not supported; "
            f"upload one of: {', '.join(MEDIA_TYPES)}",
            details={"media_type": media_type, "supported": list(MEDIA_TYPES)},
        )
    if len(data) > max_bytes:
        raise DocumentTooLarge(
            f"the document is {len(data)} bytes, more than the limit of {max_bytes} bytes",
            details={"size_bytes": len(data), "max_bytes": max_bytes},
        )
    if not data.strip():
        raise DocumentEmpty("the document is empty (no text, or only whitespace)")
    if media_type == "application/pdf":
        return _pdf_sections(data)
    text = _decoded_text(data)
    sections = _markdown_sections(text) if media_type == "text/markdown" else _plain_sections(text)
    if not sections:
        raise DocumentEmpty("the document is empty (no text, or only whitespace)")
    return sections


def _normalized(text: str) -> str:
    """NFC, \\n line ends, no trailing spaces, at most one blank line in a row, stripped."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUN.sub("\n\n", text).strip()


def _decoded_text(data: bytes) -> str:
    if data.startswith(b"%PDF"):
        raise DocumentUnreadable(
            "the document looks like a PDF (it starts with %PDF); declare it as application/pdf"
        )
    try:
        text = data.decode("utf-8-sig")  # drops a leading byte order mark
    except UnicodeDecodeError as exc:
        raise DocumentUnreadable(
            f"the document is not valid UTF-8 text (invalid byte at offset {exc.start}); "
            "save it as UTF-8 or upload a PDF",
            details={"offset": exc.start},
        ) from None
    if "\x00" in text:
        raise DocumentUnreadable("the document contains NUL bytes: it looks like binary data, not text")
    controls = sum(1 for char in text if char not in _TEXT_CONTROLS and unicodedata.category(char) == "Cc")
    if controls > len(text) * _CONTROL_SHARE_LIMIT:
        raise DocumentUnreadable(
            f"{controls} of the document's {len(text)} characters are control characters "
            f"(more than {_CONTROL_SHARE_LIMIT:.0%}): it looks like binary data, not text",
            details={"control_characters": controls, "characters": len(text)},
        )
    return text


def _plain_sections(text: str) -> list[Section]:
    """One section "s1"; text with form feeds is paged: "p1", "p2"... (empty pages keep their number)."""
    if "\f" not in text:
        body = _normalized(text)
        return [Section(label="s1", title="", text=body)] if body else []
    pages = (_normalized(page) for page in text.split("\f"))
    return [Section(label=f"p{number}", title="", text=page) for number, page in enumerate(pages, 1) if page]


def _markdown_sections(text: str) -> list[Section]:
    """A section per ATX heading (outside fenced code), headed by its heading line; a preamble first."""
    parts: list[tuple[str, list[str]]] = [("", [])]
    fence = ""
    for line in _normalized(text).split("\n"):
        opener = _FENCE.match(line)
        if fence:  # only a run of the same mark, at least as long, closes it (lines are rstripped)
            run = line.lstrip(" ")
            if len(line) - len(run) <= 3 and len(run) >= len(fence) and run == fence[0] * len(run):
                fence = ""
        elif opener and not (opener.group(1)[0] == "`" and "`" in line[opener.end() :]):
            fence = opener.group(1)  # a backtick fence's info string cannot hold a backtick
        elif heading := _HEADING.match(line):
            parts.append((_CLOSING_HASHES.sub("", heading.group(2) or "").strip(), []))
        parts[-1][1].append(line)
    kept = [(title, body) for title, lines in parts if (body := "\n".join(lines).strip())]
    return [
        Section(label=f"s{number}", title=title, text=body) for number, (title, body) in enumerate(kept, 1)
    ]


def _pdf_sections(data: bytes) -> list[Section]:
    """A section per page with extractable text, labelled with the real page number."""
    reader = _pdf_reader(data)
    page_count = len(reader.pages)
    sections: list[Section] = []
    for number in range(1, page_count + 1):
        try:
            raw = reader.pages[number - 1].extract_text()
        except Exception as exc:  # pypdf raises many kinds on broken files; all mean the same to the user
            raise DocumentUnreadable(f"page {number} of the PDF cannot be read ({_reason(exc)})") from None
        text = _normalized("".join(c for c in raw if c in _TEXT_CONTROLS or unicodedata.category(c) != "Cc"))
        if text:
            sections.append(Section(label=f"p{number}", title="", text=text))
    if not sections:
        raise DocumentEmpty(
            f"the PDF ({page_count} pages) has no extractable text; a scanned PDF needs OCR first",
            details={"pages": page_count},
        )
    return sections


def _pdf_reader(data: bytes) -> pypdf.PdfReader:
    """An open, decrypted reader whose page count (of the real page tree) is within the limit."""
    encrypted = False
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        unlocked = not encrypted or reader.decrypt("") != pypdf.PasswordType.NOT_DECRYPTED
        page_count = len(reader.pages) if unlocked else 0
    except Exception as exc:
        if encrypted:
            raise DocumentUnreadable(
                f"the PDF is encrypted in a way this server cannot decrypt ({_reason(exc)}); "
                "upload an unencrypted copy"
            ) from None
        raise DocumentUnreadable(f"the PDF cannot be read ({_reason(exc)})") from None
    if not unlocked:
        raise DocumentUnreadable("the PDF is protected by a password; upload it without the password")
    if page_count > MAX_PDF_PAGES:
        raise DocumentTooLarge(
            f"the PDF has {page_count} pages, more than the limit of {MAX_PDF_PAGES} pages",
            details={"pages": page_count, "max_pages": MAX_PDF_PAGES},
        )
    return reader


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
