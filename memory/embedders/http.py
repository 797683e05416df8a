"""An embedder that calls an OpenAI-compatible POST /embeddings endpoint over HTTP."""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.request
from typing import Any

from memory.embedders.base import (
    Embedder,
    EmbedderMisconfigured,
    EmbedderUnavailable,
    check_dimensions,
    embed_non_blank,
)

# OpenAI accepts up to 2048 inputs a request; smaller requests keep bodies and timeouts modest.
MAX_BATCH = 256


class HttpEmbedder(Embedder):
    """Embeds through `{base_url}/embeddings` with `model`, expecting vectors of `dimensions`.

    "dimensions" is sent in the request so models that can shorten their vectors (OpenAI's
    text-embedding-3-*) do; pass `send_dimensions=False` for a server or model that rejects the
    field (text-embedding-ada-002 does). Either way every vector must come back with exactly
    `dimensions` numbers, or the call fails.
    """

    version = "1"

    def __init__(
        self,
        base_url: str,
        model: str,
        dimensions: int,
        api_key: str = "",
        timeout: float = 30.0,
        *,
        send_dimensions: bool = True,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise EmbedderMisconfigured(
                f"the embedding service URL must start with http:// or https://: {base_url!r}"
            )
        if not model:
            raise EmbedderMisconfigured("the HTTP embedder needs a model name")
        self.base_url, self.model, self.api_key, self.timeout = base_url.rstrip("/"), model, api_key, timeout
        self.dimensions = check_dimensions(dimensions)
        self.send_dimensions = send_dimensions
        self.name = f"http:{model}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return embed_non_blank(texts, self.dimensions, self._embed_batches)

    def _embed_batches(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            vectors.extend(self._request(texts[start : start + MAX_BATCH]))
        return vectors

    def _request(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.send_dimensions:
            body["dimensions"] = self.dimensions
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.base_url}/embeddings", json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise EmbedderUnavailable(f"the embedding service answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise EmbedderUnavailable(
                f"the embedding service at {self.base_url} is unreachable: {exc!r}"
            ) from None
        if status != 200:
            raise EmbedderUnavailable(f"the embedding service answered HTTP {status}, expected 200")
        try:
            answer = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EmbedderUnavailable(f"the embedding service answered non-JSON: {raw[:200]!r}") from None
        return self._vectors(answer, len(texts))

    def _vectors(self, answer: Any, expected: int) -> list[list[float]]:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not all(_is_item(item) for item in data):
            raise EmbedderUnavailable(
                f"the embedding service answered outside the protocol: {str(answer)[:200]}"
            )
        lengths = sorted({len(item["embedding"]) for item in data})
        if len(data) != expected or lengths not in ([self.dimensions], []):
            shown = ", ".join(map(str, lengths)) or "-"
            raise EmbedderUnavailable(
                f"the embedding service answered {len(data)} vectors of length {shown}, "
                f"expected {expected} of length {self.dimensions}"
            )
        # Servers may answer out of order; `index` says which input each vector belongs to.
        by_index = {item["index"]: item["embedding"] for item in data}
        if sorted(by_index) != list(range(expected)):
            raise EmbedderUnavailable(
                f"the embedding service answered indexes {sorted(by_index)[:20]}, "
                f"expected 0..{expected - 1} once each"
            )
        return [[float(x) for x in by_index[i]] for i in range(expected)]


def _is_item(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
        return False
    index = item.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        return False
    # json.loads accepts NaN and Infinity, which would poison every cosine they touch.
    return all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in item["embedding"]
    )
