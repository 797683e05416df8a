"""The embedder interface shared by every backend, its errors, and the vector rules they all keep."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from core.errors import ApplicationError, InvalidInput


class EmbedderUnavailable(ApplicationError):
    """The embedder cannot answer now: a missing optional package or model, or a failing service."""

    code = "embedder_unavailable"
    http_status = 503


class EmbedderMisconfigured(ApplicationError):
    """The settings name an unknown embedder or leave out what the chosen one needs."""

    code = "embedder_misconfigured"
    http_status = 500


class Embedder(Protocol):
    """Turns texts into vectors for one projection.

    `embed` returns one vector of length `dimensions` per text, in input order, L2-normalized so a
    dot product is the cosine. A text with nothing to embed (empty or only whitespace) gets the
    all-zero vector, which stays all zeros: it has no direction, so it matches nothing.
    Backends subclass this explicitly to inherit `key`.
    """

    name: str
    version: str
    dimensions: int

    @property
    def key(self) -> str:
        """Names the projection; vectors of different keys never mix in one index or comparison."""
        return f"{self.name}:{self.version}:{self.dimensions}"

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def check_dimensions(dimensions: object, source: str = "embedding dimensions") -> int:
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise EmbedderMisconfigured(f"{source} must be a positive integer, not {dimensions!r}")
    return dimensions


def l2_normalize(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0:
        return [0.0] * len(vector)
    return [x / norm for x in vector]


def embed_non_blank(
    texts: list[str], dimensions: int, embed: Callable[[list[str]], list[list[float]]]
) -> list[list[float]]:
    """Call `embed` on the texts that have content and give blank ones zeros, keeping input order.

    Blank texts are answered here so every backend agrees on them (a model would embed its special
    tokens; OpenAI refuses an empty string outright).
    """
    # A bare string is a list of characters to the loop below: refuse it rather than embed letters.
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
        raise InvalidInput("embed takes a list of strings", code="embedder_bad_input")
    filled = [i for i, text in enumerate(texts) if text.strip()]
    vectors: list[list[float]] = [[0.0] * dimensions for _ in texts]
    if filled:
        for i, vector in zip(filled, embed([texts[i] for i in filled]), strict=True):
            vectors[i] = l2_normalize(vector)
    return vectors
