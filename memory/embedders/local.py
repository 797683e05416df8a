"""An optional embedder that runs a sentence-transformers model from a local folder."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from memory.embedders.base import Embedder, EmbedderUnavailable, embed_non_blank

_INSTALL = "pip install sentence-transformers (it brings torch; Keeper does not depend on either)"


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model loaded from `model_path`, a folder already on this machine.

    The version is the folder's name and a digest of what defines the model (its configuration
    files and the names and sizes of its weight files), so another model, or the same folder
    re-exported, is another projection. Nothing is downloaded here.
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
            self._model: Any = SentenceTransformer(folder, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise EmbedderUnavailable(
                f"could not load a sentence-transformers model from {folder}: {exc}"
            ) from None
        self.version = f"{os.path.basename(folder)}-{model_fingerprint(folder)}"
        # sentence-transformers 5.x renamed the method; older releases only have the first name.
        dimension_of = getattr(self._model, "get_embedding_dimension", None)
        dimensions = dimension_of() if dimension_of else self._model.get_sentence_embedding_dimension()
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


_DEFINING_FILES = (
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx")


def model_fingerprint(folder: str) -> str:
    """Twelve hex digits over the model's configuration files and its weight files' names and sizes.

    Hashing the weights themselves would read hundreds of megabytes at every start; a re-export
    changes the configuration or the sizes, and a different model changes both.
    """
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder)
            if name in _DEFINING_FILES:
                with open(path, "rb") as handle:
                    digest.update(f"{relative}\0".encode() + handle.read() + b"\0")
            elif name.endswith(_WEIGHT_SUFFIXES):
                digest.update(f"{relative}\0{os.path.getsize(path)}\0".encode())
    return digest.hexdigest()[:12]
