"""Pluggable text embedders for the memory vector projection and document retrieval.

`embedder_from_settings()` builds settings.BACKENDS["embedder"] (core.backends); `Embedder.key` names the
projection its vectors belong to.
"""

from __future__ import annotations

from core.backends import backend_build
from memory.embedders.base import Embedder, EmbedderMisconfigured, EmbedderUnavailable
from memory.embedders.hashing import HashingEmbedder
from memory.embedders.http import HttpEmbedder
from memory.embedders.local import SentenceTransformerEmbedder

__all__ = [
    "Embedder",
    "EmbedderMisconfigured",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "HttpEmbedder",
    "SentenceTransformerEmbedder",
    "embedder_from_settings",
]


def embedder_from_settings() -> Embedder:
    """A new embedder built from settings.BACKENDS["embedder"] on every call (tests change settings).

    config.env.embedder_choice fills that entry from the KEEPER_EMBEDDER* variables. Loading a local
    model is slow: callers that embed often should keep the instance.
    """
    embedder: Embedder = backend_build("embedder")
    return embedder
