"""Embedders: the hashing default, the optional local model's error path, and the HTTP client
against a local server speaking the OpenAI embeddings protocol."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import embedder_choice
from core.errors import InvalidInput
from memory.embedders import (
    EmbedderMisconfigured,
    EmbedderUnavailable,
    HashingEmbedder,
    HttpEmbedder,
    SentenceTransformerEmbedder,
    embedder_from_settings,
)

PROJECT = Path(__file__).resolve().parents[2]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # both are unit vectors


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# --- hashing ---------------------------------------------------------------------------------


def test_hashing_is_deterministic_across_instances():
    texts = ["refund for order 42", "Где мой возврат?", "我要退款"]
    assert HashingEmbedder().embed(texts) == HashingEmbedder().embed(texts)


def test_hashing_gives_the_same_vector_in_another_process_with_another_hash_seed():
    text = "Refund for order 42, please — возврат, 退款"
    code = (
        "import json, sys; from memory.embedders.hashing import HashingEmbedder; "
        "print(json.dumps(HashingEmbedder(64).embed([sys.argv[1]])[0]))"
    )
    # A different PYTHONHASHSEED changes every hash(); blake2b must not notice.
    env = {
        **os.environ,
        "PYTHONHASHSEED": "12345" if os.environ.get("PYTHONHASHSEED") != "12345" else "54321",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, text], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == HashingEmbedder(64).embed([text])[0]


def test_hashing_scheme_is_pinned_to_its_version():
    # Stored vectors are keyed "hashing:1:<dims>": if this changes, the scheme changed and
    # `version` must change with it, or old and new vectors would silently mix in one projection.
    vector = HashingEmbedder(32).embed(["Refund refund, order 42"])[0]
    assert {i: round(x, 9) for i, x in enumerate(vector) if x} == {
        0: -0.22742704,
        3: -0.385067451,
        9: -0.385067451,
        12: 0.22742704,
        16: 0.22742704,
        17: 0.385067451,
        24: -0.22742704,
        26: -0.385067451,
        29: 0.385067451,
        31: -0.22742704,
    }


def test_hashing_vectors_are_unit_length():
    texts = ["refund", "refund for order 42", "the the the the", "Ünïcödé ÀÉÎ", "x" * 5000, "!!! 42 ???"]
    for vector in HashingEmbedder().embed(texts):
        assert abs(norm(vector) - 1.0) < 1e-9


def test_hashing_ranks_shared_words_and_word_pieces_above_unrelated_text():
    query, close, far = HashingEmbedder().embed(
        ["refund for order 42", "refunds for order 42", "the weather in Oslo"]
    )
    assert cosine(query, close) > 0.5 > cosine(query, far)
    [refund, refunds, payment] = HashingEmbedder().embed(["refund", "refunds", "payment"])
    assert cosine(refund, refunds) > cosine(refund, payment)


def test_hashing_embeds_russian_and_chinese_text():
    russian, chinese, inflected, other = HashingEmbedder().embed(
        ["Где мой возврат за заказ?", "我的退款在哪里？", "возврата", "погода в Осло"]
    )
    for vector in (russian, chinese):
        assert any(vector) and abs(norm(vector) - 1.0) < 1e-9
    # Cyrillic word pieces are features too: an inflected form is closer than an unrelated text.
    assert cosine(russian, inflected) > cosine(russian, other)


def test_hashing_is_case_and_unicode_form_insensitive():
    decomposed = "Cafe\u0301 REFUND"  # "é" as "e" + a combining accent
    assert HashingEmbedder().embed([decomposed]) == HashingEmbedder().embed(["café refund"])


@pytest.mark.parametrize("dimensions", [1, 7, 256, 1024])
def test_hashing_respects_dimensions(dimensions):
    embedder = HashingEmbedder(dimensions)
    assert embedder.dimensions == dimensions
    assert [len(v) for v in embedder.embed(["refund for order 42", ""])] == [dimensions, dimensions]


def test_blank_texts_get_zero_vectors_in_place():
    embedder = HashingEmbedder(32)
    vectors = embedder.embed(["refund", "", "  \n", "order 42"])
    assert vectors[1] == vectors[2] == [0.0] * 32
    assert [vectors[0], vectors[3]] == embedder.embed(["refund", "order 42"])
    assert embedder.embed([]) == []


def test_key_names_the_projection():
    assert HashingEmbedder().key == "hashing:1:256"
    assert HashingEmbedder(64).key == "hashing:1:64"


@pytest.mark.parametrize("dimensions", [0, -3, True, 2.5, "256"])
def test_hashing_refuses_impossible_dimensions(dimensions):
    with pytest.raises(EmbedderMisconfigured) as caught:
        HashingEmbedder(dimensions)
    assert caught.value.code == "embedder_misconfigured"


def test_a_bare_string_is_refused_rather_than_embedded_letter_by_letter():
    with pytest.raises(InvalidInput):
        HashingEmbedder().embed("refund")


# --- sentence-transformers (optional) --------------------------------------------------------


# A real model runs in tests/memory/test_local_model.py.


def test_sentence_transformer_without_the_package_is_unavailable(tmp_path, monkeypatch):
    # None in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(EmbedderUnavailable, match="pip install sentence-transformers") as caught:
        SentenceTransformerEmbedder(str(tmp_path))
    assert caught.value.code == "embedder_unavailable"


def test_sentence_transformer_without_the_model_folder_is_unavailable(tmp_path):
    with pytest.raises(EmbedderUnavailable, match="no sentence-transformers model folder"):
        SentenceTransformerEmbedder(str(tmp_path / "all-MiniLM-L6-v2"))


# --- HTTP ------------------------------------------------------------------------------------


def served_vector(text: str, dimensions: int) -> list[float]:
    """What the test server answers for a text: unnormalized and different for every test text."""
    return [float(len(text)), float(sum(map(ord, text)) % 101), 3.0] + [0.5] * (dimensions - 3)


def unit(vector: list[float]) -> list[float]:
    length = norm(vector)
    return [x / length for x in vector]


class EmbeddingServer:
    """Speaks POST /v1/embeddings like an OpenAI-compatible provider; `reply` may rewrite the answer."""

    def __init__(self) -> None:
        self.dimensions = 8
        self.status = 200
        self.reply: Callable[[dict[str, Any]], Any] | None = None
        self.raw: bytes | None = None
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                answer = {
                    "object": "list",
                    "model": body["model"],
                    "data": [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": served_vector(text, outer.dimensions),
                        }
                        for i, text in enumerate(body["input"])
                    ],
                }
                if outer.reply is not None:
                    answer = outer.reply(answer)
                data = outer.raw if outer.raw is not None else json.dumps(answer).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def embeddings() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_http_embedder_sends_the_protocol_and_normalizes_the_answer(embeddings):
    texts = ["refund for order 42", "where is my parcel"]
    vectors = HttpEmbedder(embeddings.url + "/", "embed-small", 8).embed(texts)
    assert vectors == [unit(served_vector(t, 8)) for t in texts]
    [sent] = embeddings.requests
    assert sent["path"] == "/v1/embeddings" and sent["auth"] is None
    assert sent["body"] == {"model": "embed-small", "input": texts, "dimensions": 8}


def test_http_embedder_restores_input_order_from_the_index(embeddings):
    embeddings.reply = lambda answer: {**answer, "data": answer["data"][::-1]}
    texts = [f"text number {n}" for n in range(5)]
    assert HttpEmbedder(embeddings.url, "m", 8).embed(texts) == [unit(served_vector(t, 8)) for t in texts]


def test_http_embedder_sends_the_key_and_can_leave_dimensions_out(embeddings):
    HttpEmbedder(embeddings.url, "m", 8, api_key="k-test", send_dimensions=False).embed(["refund"])
    [sent] = embeddings.requests
    assert sent["auth"] == "Bearer k-test" and "dimensions" not in sent["body"]


def test_http_embedder_batches_at_most_256_texts_a_request(embeddings):
    texts = [f"t{n}" for n in range(600)]
    vectors = HttpEmbedder(embeddings.url, "m", 8).embed(texts)
    assert [len(r["body"]["input"]) for r in embeddings.requests] == [256, 256, 88]
    assert vectors == [unit(served_vector(t, 8)) for t in texts]


def test_http_embedder_does_not_send_blank_texts(embeddings):
    vectors = HttpEmbedder(embeddings.url, "m", 8).embed(["", "refund", " "])
    assert [r["body"]["input"] for r in embeddings.requests] == [["refund"]]
    assert vectors == [[0.0] * 8, unit(served_vector("refund", 8)), [0.0] * 8]
    assert HttpEmbedder(embeddings.url, "m", 8).embed(["", "\t"]) == [[0.0] * 8] * 2
    assert len(embeddings.requests) == 1


def test_http_embedder_refuses_vectors_of_the_wrong_length(embeddings):
    embeddings.dimensions = 6
    with pytest.raises(EmbedderUnavailable) as caught:
        HttpEmbedder(embeddings.url, "m", 8).embed(["a", "b"])
    assert (
        caught.value.message == "the embedding service answered 2 vectors of length 6, expected 2 of length 8"
    )


def test_http_embedder_refuses_the_wrong_number_of_vectors(embeddings):
    embeddings.reply = lambda answer: {**answer, "data": answer["data"][:-1]}
    with pytest.raises(EmbedderUnavailable, match="answered 2 vectors of length 8, expected 3 of length 8"):
        HttpEmbedder(embeddings.url, "m", 8).embed(["a", "b", "c"])


def test_http_embedder_refuses_repeated_indexes(embeddings):
    embeddings.reply = lambda answer: {**answer, "data": [{**item, "index": 0} for item in answer["data"]]}
    with pytest.raises(EmbedderUnavailable, match="indexes"):
        HttpEmbedder(embeddings.url, "m", 8).embed(["a", "b"])


@pytest.mark.parametrize(
    ("status", "raw", "reply", "message"),
    [
        (500, b'{"error": {"message": "overloaded"}}', None, "HTTP 500: .*overloaded"),
        (200, b"<html>gateway</html>", None, "non-JSON"),
        (200, None, lambda answer: {"error": "no data"}, "outside the protocol"),
        (200, None, lambda answer: {"data": [{"index": 0, "embedding": "oops"}]}, "outside the protocol"),
        (
            200,
            b'{"data": [{"index": 0, "embedding": [NaN, 1, 1, 1, 1, 1, 1, 1]}]}',
            None,
            "outside the protocol",
        ),
    ],
)
def test_http_embedder_turns_a_bad_answer_into_unavailable(embeddings, status, raw, reply, message):
    embeddings.status, embeddings.raw, embeddings.reply = status, raw, reply
    with pytest.raises(EmbedderUnavailable, match=message):
        HttpEmbedder(embeddings.url, "m", 8).embed(["a"])


def test_http_embedder_turns_a_refused_connection_into_unavailable(embeddings):
    url = embeddings.url
    embeddings.server.shutdown()
    embeddings.server.server_close()
    with pytest.raises(EmbedderUnavailable, match="unreachable"):
        HttpEmbedder(url, "m", 8, timeout=2).embed(["a"])


def test_http_embedder_names_its_projection_after_the_model():
    assert HttpEmbedder("https://api.example.test/v1", "text-embedding-3-small", 512).key == (
        "http:text-embedding-3-small:1:512"
    )


# --- settings --------------------------------------------------------------------------------


def embedder_backend(kind: str = "hashing", **given: Any) -> dict[str, Any]:
    """settings.BACKENDS["embedder"] as config.env.embedder_choice builds it from the variables."""
    values = {
        "url": "",
        "model": "",
        "api_key": "",
        "model_path": "",
        "dimensions": 256,
        "send_dimensions": True,
    }
    return embedder_choice(kind, **{**values, **given})


def test_the_variables_default_to_hashing_with_256_dimensions():
    assert embedder_backend() == {
        "BACKEND": "memory.embedders.hashing.HashingEmbedder",
        "OPTIONS": {"dimensions": 256},
    }


def test_the_backend_setting_is_read_on_every_call(settings, embeddings):
    settings.BACKENDS = {**settings.BACKENDS, "embedder": embedder_backend(dimensions=64)}
    assert embedder_from_settings().key == "hashing:1:64"
    backend = embedder_backend(
        "http", url=embeddings.url, model="embed-small", api_key="k-test", dimensions=8
    )
    settings.BACKENDS = {**settings.BACKENDS, "embedder": backend}
    embedder = embedder_from_settings()
    assert embedder.key == "http:embed-small:1:8"
    embedder.embed(["refund"])
    assert embeddings.requests[0]["auth"] == "Bearer k-test"


@pytest.mark.parametrize(
    ("kind", "given", "message"),
    [
        ("word2vec", {}, "unknown KEEPER_EMBEDDER 'word2vec'"),
        ("http", {"model": "m"}, "KEEPER_EMBEDDER=http needs KEEPER_EMBEDDER_URL"),
        ("http", {"url": "http://x"}, "KEEPER_EMBEDDER=http needs KEEPER_EMBEDDER_MODEL"),
        ("sentence-transformers", {}, "needs KEEPER_EMBEDDER_MODEL_PATH"),
    ],
)
def test_variables_that_cannot_work_stop_the_process_at_settings(kind, given, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        embedder_backend(kind, **given)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_url": "api.example.test", "model": "m", "dimensions": 8}, "must start with http"),
        ({"base_url": "http://x", "model": "m", "dimensions": "lots"}, "must be a positive integer"),
    ],
)
def test_options_that_cannot_work_are_misconfigured(settings, options, message):
    backend = {"BACKEND": "memory.embedders.http.HttpEmbedder", "OPTIONS": options}
    settings.BACKENDS = {**settings.BACKENDS, "embedder": backend}
    with pytest.raises(EmbedderMisconfigured, match=message) as caught:
        embedder_from_settings()
    assert caught.value.code == "embedder_misconfigured"


def test_settings_pointing_at_a_missing_model_folder_are_unavailable(settings, tmp_path):
    backend = embedder_backend("sentence-transformers", model_path=str(tmp_path / "nowhere"))
    settings.BACKENDS = {**settings.BACKENDS, "embedder": backend}
    with pytest.raises(EmbedderUnavailable):
        embedder_from_settings()
