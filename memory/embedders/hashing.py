"""The offline default embedder: feature hashing of words and word pieces, no model and no network."""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter

from memory.embedders.base import Embedder, check_dimensions, embed_non_blank

# \w is Unicode-aware on str patterns: Cyrillic, Chinese and accented Latin letters count as words.
_WORD = re.compile(r"\w+")
# Domain-separates our features from any other use of blake2b and pins this scheme; changing the
# tokens, the hash or the weighting changes every vector, so it must come with a new `version`.
_PERSON = b"keeper-hash-1"


class HashingEmbedder(Embedder):
    """Feature hashing ("the hashing trick") of words and character 3-grams into `dimensions` buckets.

    What it can do: find texts that share words or pieces of words. Text is NFKC-normalized and
    case-folded; each word counts as a feature, and so does every 3-character piece of it with the
    word's edges marked ("<re", "ref", ..., "ds>"), so "refund" and "refunds" share most features
    and any script with letters gets some. Each feature is hashed with blake2b (the same vector on
    every process and machine, unlike Python's salted hash()) to a bucket and a sign; term counts
    are dampened to 1 + log(tf); the vector is L2-normalized. Deterministic, pure Python, no model.

    What it cannot do: understand meaning. It does not know that "refund" and "money back" mean
    the same thing, nor handle synonyms, paraphrase, negation or translation. For scripts written
    without spaces (Chinese, Japanese) a "word" is a whole run between punctuation, so matching
    rests on shared 3-character pieces only. Unrelated texts can collide in a bucket, more often
    with fewer dimensions. Use it offline, in tests and as a baseline to beat; not for semantic
    search quality.
    """

    name = "hashing"
    version = "1"

    def __init__(self, dimensions: int = 256):
        self.dimensions = check_dimensions(dimensions)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return embed_non_blank(texts, self.dimensions, lambda filled: [self._vector(t) for t in filled])

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for feature, tf in _features(text).items():
            digest = int.from_bytes(
                hashlib.blake2b(feature.encode(), digest_size=8, person=_PERSON).digest(), "big"
            )
            # The low bit gives the sign, so colliding features cancel out on average instead of piling up.
            sign = 1.0 if digest & 1 else -1.0
            vector[(digest >> 1) % self.dimensions] += sign * (1.0 + math.log(tf))
        return vector


def _features(text: str) -> Counter[str]:
    features: Counter[str] = Counter()
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
        # Prefixes keep the word "the" and the piece "the" (as in "other") apart.
        features["w:" + word] += 1
        marked = f"<{word}>"
        for start in range(len(marked) - 2):
            features["c:" + marked[start : start + 3]] += 1
    return features
