"""Sections -> chunks: id format, packing, bounds, determinism, limits and refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.digests import sha256_digest
from core.errors import InvalidInput
from retrieval.chunking import (
    CHUNKER_VERSION,
    ChunkText,
    InvalidChunkLimits,
    InvalidDocumentId,
    InvalidSectionLabel,
    chunk_sections,
    text_words,
)
from retrieval.sources import DocumentTooLarge, Section, source_sections
from tests.retrieval.pdfs import pdf_bytes

ROOT = Path(__file__).resolve().parents[2]


def section(text: str, label: str = "s1") -> Section:
    return Section(label=label, title="", text=text)


def texts(text: str, *, max_words: int, overlap_words: int = 0) -> list[str]:
    chunks = chunk_sections(
        document_id="doc", sections=[section(text)], max_words=max_words, overlap_words=overlap_words
    )
    return [chunk.text for chunk in chunks]


def words(count: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{n}" for n in range(1, count + 1))


def test_chunk_ids_name_document_section_and_dense_ordinal() -> None:
    sections = [section(words(5, "a"), "p1"), section("   \n", "p2"), section(words(3, "b"), "p3")]
    chunks = chunk_sections(document_id="policy-42", sections=sections, max_words=2)
    assert [(c.chunk_id, c.section, c.ordinal) for c in chunks] == [
        ("policy-42:p1:c1", "p1", 1),
        ("policy-42:p1:c2", "p1", 2),
        ("policy-42:p1:c3", "p1", 3),
        ("policy-42:p3:c1", "p3", 1),
        ("policy-42:p3:c2", "p3", 2),
    ]
    assert [c.text for c in chunks] == ["a1 a2", "a3 a4", "a5", "b1 b2", "b3"]


def test_content_digest_is_the_sha256_of_the_text() -> None:
    chunk = chunk_sections(document_id="d", sections=[section("Refunds take 5 days.")])[0]
    assert chunk == ChunkText(
        chunk_id="d:s1:c1",
        section="s1",
        ordinal=1,
        text="Refunds take 5 days.",
        content_digest=sha256_digest("Refunds take 5 days."),
    )
    assert chunk.content_digest.startswith("sha256:")
    assert CHUNKER_VERSION == "chunker-v1"


def test_whole_paragraphs_are_packed_while_they_fit() -> None:
    text = "one two\nthree\n\n\n  \nfour five\n\nsix seven eight\n\nnine"
    assert texts(text, max_words=5) == ["one two\nthree\n\nfour five", "six seven eight\n\nnine"]


def test_a_long_paragraph_is_cut_at_sentence_ends() -> None:
    text = "First one is here. Second! Third one, is it? Fourth sentence ends here."
    assert texts(text, max_words=5) == [
        "First one is here. Second!",
        "Third one, is it?",
        "Fourth sentence ends here.",
    ]


def test_a_sentence_longer_than_max_words_is_cut_into_windows() -> None:
    text = f"{words(10)}. Short end."
    assert texts(text, max_words=4) == ["w1 w2 w3 w4", "w5 w6 w7 w8", "w9 w10. Short end."]


def test_chinese_text_without_spaces_is_bounded_by_characters() -> None:
    sentence = "退款须在三十天内申请" + "。"  # ten ideographs and a full stop: 11 words
    text = sentence * 40
    chunks = texts(text, max_words=30)
    assert len(text_words(sentence)) == 11
    assert all(len(text_words(chunk)) <= 30 for chunk in chunks)
    assert chunks[0] == sentence * 2  # cut at the full stop, although no space follows it
    assert "".join(chunks) == text


def test_japanese_kana_count_per_character_and_russian_per_word() -> None:
    assert text_words("ひらがなカタカナ") == list("ひらがなカタカナ")
    assert text_words("Возврат денег — за 5 дней.") == ["Возврат", "денег", "—", "за", "5", "дней."]
    assert text_words("Keeper保存abc。") == ["Keeper", "保", "存", "abc", "。"]


def test_every_chunk_respects_max_words() -> None:
    text = "\n\n".join(f"{words(n)}." for n in (3, 17, 1, 40, 2, 9))
    for max_words in (1, 2, 5, 16, 50):
        assert all(len(text_words(chunk)) <= max_words for chunk in texts(text, max_words=max_words))


def test_overlap_repeats_the_last_words_of_the_chunk_before() -> None:
    assert texts(words(10), max_words=4, overlap_words=1) == [
        "w1 w2 w3",
        "w3 w4 w5 w6",
        "w6 w7 w8 w9",
        "w9 w10",
    ]


def test_overlap_does_not_cross_sections() -> None:
    sections = [section("a b c", "s1"), section("d e f", "s2")]
    chunks = chunk_sections(document_id="d", sections=sections, max_words=3, overlap_words=1)
    assert [c.text for c in chunks] == ["a b", "b c", "d e", "e f"]


def test_same_sections_give_the_same_chunks() -> None:
    sections = source_sections(
        data=pdf_bytes([["Alpha beta. Gamma."], [], ["Delta."]]),
        media_type="application/pdf",
        max_bytes=10**6,
    )
    first = chunk_sections(document_id="doc-7", sections=sections, max_words=2)
    assert first == chunk_sections(document_id="doc-7", sections=list(sections), max_words=2)
    assert [c.chunk_id for c in first] == ["doc-7:p1:c1", "doc-7:p1:c2", "doc-7:p3:c1"]


def test_chunks_are_the_same_in_another_process_with_another_hash_seed() -> None:
    text = "Возврат денег. 退款须在三十天内申请。\n\n" + words(50) + " 🎉"
    script = (
        "import json, sys\n"
        "from retrieval.chunking import chunk_sections\n"
        "from retrieval.sources import Section\n"
        "chunks = chunk_sections(document_id='d', sections=[Section('s1', '', sys.argv[1])], max_words=7)\n"
        "print(json.dumps([[c.chunk_id, c.content_digest] for c in chunks]))\n"
    )
    here = [
        [c.chunk_id, c.content_digest]
        for c in chunk_sections(document_id="d", sections=[section(text)], max_words=7)
    ]
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", script, text],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(result.stdout) == here
    assert len(here) > 5


def test_more_chunks_than_max_chunks_is_too_large_and_returns_nothing() -> None:
    sections = [section(words(6), "s1"), section(words(5), "s2")]
    assert len(chunk_sections(document_id="d", sections=sections, max_words=1, max_chunks=11)) == 11
    with pytest.raises(DocumentTooLarge, match="more than 10 chunks") as caught:
        chunk_sections(document_id="d", sections=sections, max_words=1, max_chunks=10)
    assert caught.value.code == "document_too_large"


@pytest.mark.parametrize(
    "document_id", ["", "a" * 201, "a:b", "a b", "a\tb", "a\nb", "a\x00b", "a\x7fb", "\u2028"]
)
def test_ambiguous_document_ids_are_refused(document_id: str) -> None:
    with pytest.raises(InvalidDocumentId) as caught:
        chunk_sections(document_id=document_id, sections=[section("text")])
    assert caught.value.code == "invalid_document_id"
    assert isinstance(caught.value, InvalidInput)


@pytest.mark.parametrize("document_id", ["a" * 200, "policy-42", "документ_1", "tenant/doc.v2"])
def test_plain_document_ids_are_accepted(document_id: str) -> None:
    assert (
        chunk_sections(document_id=document_id, sections=[section("text")])[0].chunk_id
        == f"{document_id}:s1:c1"
    )


@pytest.mark.parametrize("labels", [["s1", "s1"], ["p:1"], [""], ["s 1"]])
def test_section_labels_that_make_ids_ambiguous_are_refused(labels: list[str]) -> None:
    with pytest.raises(InvalidSectionLabel):
        chunk_sections(document_id="d", sections=[section("text", label) for label in labels])


@pytest.mark.parametrize(
    ("max_words", "overlap_words", "max_chunks"), [(0, 0, 1), (3, 3, 1), (3, -1, 1), (3, 0, 0)]
)
def test_impossible_limits_are_refused(max_words: int, overlap_words: int, max_chunks: int) -> None:
    with pytest.raises(InvalidChunkLimits):
        chunk_sections(
            document_id="d",
            sections=[section("text")],
            max_words=max_words,
            overlap_words=overlap_words,
            max_chunks=max_chunks,
        )


# Properties

TEXTS = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list(" \n\n\n.!?。！？退款ひらabc")),
    ),
    max_size=400,
)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, max_words=st.integers(1, 20))
def test_chunks_are_bounded_and_hold_every_word_once_in_order(text: str, max_words: int) -> None:
    chunks = texts(text, max_words=max_words)
    assert all(len(text_words(chunk)) <= max_words for chunk in chunks)
    assert all(text_words(chunk) for chunk in chunks)
    assert [word for chunk in chunks for word in text_words(chunk)] == text_words(text)


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, max_words=st.integers(2, 20), data=st.data())
def test_overlapping_chunks_are_bounded_and_lose_no_word(
    text: str, max_words: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(1, max_words - 1))
    chunks = [text_words(chunk) for chunk in texts(text, max_words=max_words, overlap_words=overlap)]
    assert all(len(chunk) <= max_words for chunk in chunks)
    new_words = chunks[0] if chunks else []
    fresh = len(new_words)
    for before, chunk in zip(chunks, chunks[1:], strict=False):
        repeated = min(overlap, fresh)
        assert chunk[:repeated] == before[len(before) - repeated :]
        new_words = new_words + chunk[repeated:]
        fresh = len(chunk) - repeated
    assert new_words == text_words(text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="ascii"), max_size=300))
def test_latin_words_are_whitespace_separated_tokens(text: str) -> None:
    assert text_words(text) == text.split()
