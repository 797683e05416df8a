"""The traits a model may not infer about a person: memory_remember and the extractors both refuse them."""

from __future__ import annotations

# Traits a model must not infer and keep about a person without their explicit confirmation.
SENSITIVE_TERMS = (
    "mood",
    "emotion",
    "angry",
    "anger",
    "health",
    "medical",
    "diagnosis",
    "religion",
    "politic",
    "sexual",
    "ethnic",
    "pregnan",
    "disabilit",
    "union_member",
)
