"""Pluggable text embedders for the memory vector projection and document retrieval.

`embedder_from_settings()` picks one from the KEEPER_EMBEDDER* settings; `Embedder.key` names the
projection its vectors belong to.
"""

from __future__ import annotations

from django.conf import settings

from memory.embedders.base import Embedder, EmbedderMisconfigured, EmbedderUnavailable, check_dimensions
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
    """A new embedder built from the current settings on every call (tests change settings); every
    KEEPER_EMBEDDER* variable is read in config/settings/base.py.

    KEEPER_EMBEDDER is "hashing" (default), "sentence-transformers" (needs
    KEEPER_EMBEDDER_MODEL_PATH) or "http" (needs KEEPER_EMBEDDER_URL and KEEPER_EMBEDDER_MODEL;
    KEEPER_EMBEDDER_API_KEY optional, KEEPER_EMBEDDER_SEND_DIMENSIONS default True).
    KEEPER_EMBEDDER_DIMENSIONS (default 256) sizes hashing and http; a local model has its own size.
    Loading a local model is slow: callers that embed often should keep the instance.
    """
    kind = settings.KEEPER_EMBEDDER
    if kind == "hashing":
        return HashingEmbedder(_dimensions())
    if kind == "sentence-transformers":
        return SentenceTransformerEmbedder(_required("KEEPER_EMBEDDER_MODEL_PATH", kind))
    if kind == "http":
        return HttpEmbedder(
            _required("KEEPER_EMBEDDER_URL", kind),
            _required("KEEPER_EMBEDDER_MODEL", kind),
            _dimensions(),
            api_key=settings.KEEPER_EMBEDDER_API_KEY,
            send_dimensions=_send_dimensions(),
        )
    raise EmbedderMisconfigured(
        f"unknown KEEPER_EMBEDDER {kind!r} (use hashing, sentence-transformers or http)"
    )


def _required(name: str, kind: str) -> str:
    value = getattr(settings, name)
    if not value:
        raise EmbedderMisconfigured(f"KEEPER_EMBEDDER={kind} needs {name}")
    return str(value)


def _dimensions() -> int:
    value = settings.KEEPER_EMBEDDER_DIMENSIONS
    # Settings read straight from the environment may hold "384".
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return check_dimensions(value, "KEEPER_EMBEDDER_DIMENSIONS")


def _send_dimensions() -> bool:
    value = settings.KEEPER_EMBEDDER_SEND_DIMENSIONS
    # bool("false") is True: a string here would silently mean the opposite of what was written.
    if not isinstance(value, bool):
        raise EmbedderMisconfigured(f"KEEPER_EMBEDDER_SEND_DIMENSIONS must be True or False, not {value!r}")
    return value
