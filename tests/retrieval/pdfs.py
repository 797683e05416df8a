"""Small valid PDFs written by hand (one Helvetica text line per string), so the tests need no fixtures."""

from __future__ import annotations

_HEADER = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"


def _pdf_string(text: str) -> bytes:
    """A PDF literal string in WinAnsi (cp1252); Helvetica cannot show other scripts."""
    raw = text.encode("cp1252")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _content(lines: list[str]) -> bytes:
    if not lines:
        return b""
    shown = b" T*\n".join(_pdf_string(line) + b" Tj" for line in lines)
    return b"BT\n/F1 12 Tf\n14 TL\n72 720 Td\n" + shown + b"\nET\n"


def pdf_bytes(pages: list[list[str]]) -> bytes:
    """A PDF with one page per item; each page shows its lines top-down ([] is a page with no text)."""
    page_numbers = [4 + 2 * index for index in range(len(pages))]
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % number for number in page_numbers)
        + b"] /Count %d >>" % len(pages),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for number, lines in zip(page_numbers, pages, strict=True):
        stream = _content(lines)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            b" /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (number + 1)
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")

    out = bytearray(_HEADER)
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref_at)
    return bytes(out)
