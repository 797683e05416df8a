"""An optional embedder that runs a sentence-transformers model from a local folder."""

from __future__ import annotations

import os
from typing import Any

from memory.embedders.base import Embedder, EmbedderUnavailable, embed_non_blank

_INSTALL = "pip install sentence-transformers (it brings torch; Keeper does not depend on either)"


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model loaded from `model_path`, a folder already on this machine.

    The folder's name is the version, so a different model (or a re-exported one in a new folder)
    is a different projection. Nothing is downloaded here.
    """

    name = "sentence-transformers"

    def __init__(self, model_path: str):
        folder = os.path.abspath(model_path)
        # The path first: it is cheap to check, while importing torch takes seconds.
        if not os.path.isdir(folder):
            raise EmbedderUnavailable(
                f"no sentence-transformers model folder at {folder}: download or copy the model there "
                "(e.g. a saved SentenceTransformer) or point KEEPER_EMBEDDER_MODEL_PATH at one"
            )
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderUnavailable(f"the sentence-transformers embedder needs {_INSTALL}: {exc}") from None
        try:
            self._model: Any = SentenceTransformer(folder)
        except (OSError, ValueError) as exc:
            raise EmbedderUnavailable(
                f"could not load a sentence-transformers model from {folder}: {exc}"
            ) from None
        self.version = os.path.basename(folder)
        dimensions = self._model.get_sentence_embedding_dimension()
        # Some models cannot tell their size before they run; one probe sentence settles it.
        self.dimensions = int(dimensions) if dimensions else len(self._encode(["dimension probe"])[0])

    def embed(self, texts: list[str]) -> list[list[float]]:
        return embed_non_blank(texts, self.dimensions, self._encode)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self._model.encode(
            texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        # The model normalizes in float32; embed_non_blank normalizes again in float64.
        return vectors.tolist()
