"""Uploaded bytes -> sections: plain text, Markdown, PDF, and every way a document is refused."""

from __future__ import annotations

import io
import logging
import random
import warnings

import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from retrieval import sources
from retrieval.sources import (
    MEDIA_TYPES,
    DocumentEmpty,
    DocumentTooLarge,
    DocumentUnreadable,
    Section,
    UnsupportedMediaType,
    media_type_guess,
    source_sections,
)
from tests.retrieval.pdfs import pdf_bytes

LIMIT = 1_000_000
PDF = "application/pdf"


def sections_of(data: bytes | str, media_type: str = "text/plain", max_bytes: int = LIMIT) -> list[Section]:
    raw = data.encode() if isinstance(data, str) else data
    return source_sections(data=raw, media_type=media_type, max_bytes=max_bytes)


def encrypted(data: bytes, *, user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# Plain text


def test_plain_text_is_one_normalized_section() -> None:
    text = "  Cafe\u0301 menu   \r\n\r\nline two\t\rline three\n\n\n\n\nlast  \n\n"
    assert sections_of(text) == [
        Section(label="s1", title="", text="Caf\u00e9 menu\n\nline two\nline three\n\nlast")
    ]


def test_plain_text_keeps_every_script_intact() -> None:
    text = "Привет, мир.\n中文文本。\nمرحبا بالعالم\nשלום\n👩‍💻 ok 🎉"
    assert sections_of(text)[0].text == text


def test_utf8_byte_order_mark_is_dropped() -> None:
    assert sections_of(b"\xef\xbb\xbfhello")[0].text == "hello"


def test_form_feeds_page_plain_text_and_empty_pages_keep_their_number() -> None:
    sections = sections_of("first page\n\f  \n\fthird page\f")
    assert [(s.label, s.text) for s in sections] == [("p1", "first page"), ("p3", "third page")]


def test_a_few_control_characters_are_tolerated() -> None:
    text = "\x1b" + "a" * 99  # exactly 1%
    assert sections_of(text)[0].text == text


# Markdown


MARKDOWN = """Preamble before any heading.

# Refund policy #

Refunds within 30 days.
#hashtag is not a heading
####### seven hashes are not a heading either
    # indented four spaces: code, not a heading

```python
# a comment inside fenced code
x = 1
```

## Exceptions

~~~
# also fenced
~~~
Gift cards are final.
"""


def test_markdown_sections_start_at_headings_outside_fenced_code() -> None:
    sections = sections_of(MARKDOWN, "text/markdown")
    assert [(s.label, s.title) for s in sections] == [
        ("s1", ""),
        ("s2", "Refund policy"),
        ("s3", "Exceptions"),
    ]
    assert sections[0].text == "Preamble before any heading."
    assert sections[1].text.startswith("# Refund policy #\n\nRefunds within 30 days.\n#hashtag")
    assert sections[1].text.endswith("```python\n# a comment inside fenced code\nx = 1\n```")
    assert sections[2].text == "## Exceptions\n\n~~~\n# also fenced\n~~~\nGift cards are final."


def test_markdown_without_preamble_numbers_its_sections_densely() -> None:
    sections = sections_of("\n   \n# One\nalpha\n## Two\n### Три 🎉\nбета", "text/markdown")
    assert [(s.label, s.title, s.text) for s in sections] == [
        ("s1", "One", "# One\nalpha"),
        ("s2", "Two", "## Two"),
        ("s3", "Три 🎉", "### Три 🎉\nбета"),
    ]


def test_a_fence_closes_only_on_a_run_of_its_own_mark_at_least_as_long() -> None:
    text = "````\n```\n# still code\n~~~~\n   `````  \n# Out\ntext\n```js`x\n# Also out"
    sections = sections_of(text, "text/markdown")
    assert [(s.label, s.title) for s in sections] == [("s1", ""), ("s2", "Out"), ("s3", "Also out")]
    assert sections[0].text == "````\n```\n# still code\n~~~~\n   `````"
    assert sections[1].text == "# Out\ntext\n```js`x"


def test_unclosed_fence_hides_the_headings_after_it() -> None:
    sections = sections_of("# Top\n```\n# inside\n", "text/markdown")
    assert [s.title for s in sections] == ["Top"]


# PDF


def test_hand_written_pdf_reads_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    data = pdf_bytes([["Price (net) \\ gross"], []])
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="pypdf"):
        warnings.simplefilter("error")
        reader = pypdf.PdfReader(io.BytesIO(data), strict=True)
        texts = [page.extract_text() for page in reader.pages]
    assert texts == ["Price (net) \\ gross", ""]
    assert caplog.records == []


def test_pdf_gives_one_section_per_page_with_text_labelled_by_page_number() -> None:
    data = pdf_bytes([["Terms of service", "Section one."], [], ["Caf\u00e9 \u2014 last page"]])
    sections = sections_of(data, PDF)
    assert sections == [
        Section(label="p1", title="", text="Terms of service\nSection one."),
        Section(label="p3", title="", text="Caf\u00e9 \u2014 last page"),
    ]


def test_pdf_with_an_empty_user_password_is_read() -> None:
    data = encrypted(pdf_bytes([["open to all"]]), user_password="")
    assert sections_of(data, PDF)[0].text == "open to all"


# Refusals


@pytest.mark.parametrize(
    "media_type", ["text/html", "", "image/png", "text/plain; charset=utf-8", "TEXT/PLAIN"]
)
def test_unsupported_media_types_are_refused(media_type: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        sections_of("hello", media_type)
    assert caught.value.code == "unsupported_media_type"
    assert caught.value.http_status == 415
    assert "text/markdown" in caught.value.message


@pytest.mark.parametrize("media_type", MEDIA_TYPES)
def test_one_byte_over_the_limit_is_too_large_and_checked_before_parsing(media_type: str) -> None:
    data = b"\x00garbage that would be unreadable"
    with pytest.raises(DocumentTooLarge) as caught:
        sections_of(data, media_type, max_bytes=len(data) - 1)
    assert caught.value.code == "document_too_large"
    assert caught.value.http_status == 413
    assert str(len(data)) in caught.value.message and str(len(data) - 1) in caught.value.message


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(b"exactly the limit", "text/plain"), (b"# exactly", "text/markdown"), (pdf_bytes([["x"]]), PDF)],
)
def test_exactly_max_bytes_is_accepted(data: bytes, media_type: str) -> None:
    assert len(sections_of(data, media_type, max_bytes=len(data))) == 1


def test_pdf_with_too_many_pages_is_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_PDF_PAGES", 2)
    with pytest.raises(DocumentTooLarge, match="3 pages, more than the limit of 2 pages"):
        sections_of(pdf_bytes([["a"], ["b"], ["c"]]), PDF)
    assert len(sources.source_sections(data=pdf_bytes([["a"], ["b"]]), media_type=PDF, max_bytes=LIMIT)) == 2


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        *((data, media_type) for data in (b"", b"  \n\t \r\n ") for media_type in MEDIA_TYPES),
        ("\u3000\u00a0\n\u2003".encode(), "text/plain"),
        ("\u3000\u00a0\n\u2003".encode(), "text/markdown"),
    ],
)
def test_empty_or_whitespace_documents_are_empty(data: bytes, media_type: str) -> None:
    with pytest.raises(DocumentEmpty) as caught:
        sections_of(data, media_type)
    assert caught.value.code == "document_empty"
    assert caught.value.http_status == 422


def test_plain_text_of_blank_pages_is_empty() -> None:
    with pytest.raises(DocumentEmpty):
        sections_of("\f \f\n\f", "text/plain")


def test_pdf_without_text_needs_ocr() -> None:
    with pytest.raises(DocumentEmpty, match="no extractable text; a scanned PDF needs OCR first"):
        sections_of(pdf_bytes([[], []]), PDF)


@pytest.mark.parametrize("media_type", ["text/plain", "text/markdown"])
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"text with a \x00 NUL byte", "NUL"),
        (b"caf\xe9 au lait", "not valid UTF-8 text (invalid byte at offset 3)"),
        (random.Random(7).randbytes(4096), "UTF-8"),
        (b"\x1b\x1b" + b"a" * 100, "control characters"),
        (pdf_bytes([["a pdf"]]), "declare it as application/pdf"),
    ],
)
def test_text_that_is_not_text_is_unreadable(data: bytes, reason: str, media_type: str) -> None:
    with pytest.raises(DocumentUnreadable) as caught:
        sections_of(data, media_type)
    assert caught.value.code == "document_unreadable"
    assert caught.value.http_status == 422
    assert reason in caught.value.message


@pytest.mark.parametrize(
    "data",
    [
        pdf_bytes([["cut short"], ["page two"]])[:300],
        pdf_bytes([["cut short"]])[:20],
        random.Random(7).randbytes(4096),
        b"%PDF-1.4\nnot really a pdf\n%%EOF\n",
    ],
)
def test_broken_pdfs_are_unreadable_with_the_reason(data: bytes) -> None:
    with pytest.raises(DocumentUnreadable, match=r"the PDF cannot be read \(\w+"):
        sections_of(data, PDF)


def test_password_protected_pdf_is_unreadable() -> None:
    with pytest.raises(DocumentUnreadable, match="protected by a password"):
        sections_of(encrypted(pdf_bytes([["secret"]]), user_password="pw"), PDF)


def test_pdf_encryption_pypdf_cannot_handle_is_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    def needs_cryptography(self: pypdf.PdfReader, password: str) -> None:
        raise pypdf.errors.DependencyError("cryptography>=3.1 is required for AES algorithm")

    monkeypatch.setattr(pypdf.PdfReader, "decrypt", needs_cryptography)
    with pytest.raises(DocumentUnreadable, match="encrypted in a way this server cannot decrypt"):
        sections_of(encrypted(pdf_bytes([["secret"]]), user_password=""), PDF)


def test_every_refusal_is_an_invalid_input_with_its_own_code() -> None:
    classes = [UnsupportedMediaType, DocumentTooLarge, DocumentUnreadable, DocumentEmpty]
    assert all(issubclass(cls, InvalidInput) for cls in classes)
    assert len({cls.code for cls in classes}) == len(classes)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=600), media_type=st.sampled_from(MEDIA_TYPES))
def test_arbitrary_bytes_give_sections_or_a_refusal_never_a_crash(data: bytes, media_type: str) -> None:
    try:
        sections = sections_of(data, media_type)
    except InvalidInput as refusal:
        assert refusal.code in {"document_unreadable", "document_empty"}
    else:
        assert sections and all(s.text and s.text == s.text.strip() for s in sections)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8))
def test_damaged_pdfs_give_sections_or_a_refusal_never_a_crash(edits: list[tuple[int, int]]) -> None:
    data = bytearray(pdf_bytes([["first page"], [], ["third page"]]))
    for position, value in edits:
        data[position % len(data)] = value
    try:
        sections = sections_of(bytes(data), PDF)
    except InvalidInput as refusal:
        assert refusal.code in {"document_unreadable", "document_empty"}
    else:
        assert {s.label for s in sections} <= {"p1", "p2", "p3"}


# media_type_guess


@pytest.mark.parametrize(
    ("filename", "declared", "expected"),
    [
        ("notes.md", "", "text/markdown"),
        ("NOTES.MARKDOWN", "application/octet-stream", "text/markdown"),
        ("scan.pdf", "", PDF),
        ("readme.txt", "", "text/plain"),
        ("readme.txt", "text/markdown; charset=utf-8", "text/markdown"),
        ("report.pdf", "Text/Plain", "text/plain"),
        ("page.html", "text/html; charset=utf-8", "text/html"),
        ("archive", "", "application/octet-stream"),
    ],
)
def test_media_type_guess(filename: str, declared: str, expected: str) -> None:
    assert media_type_guess(filename=filename, declared=declared) == expected
