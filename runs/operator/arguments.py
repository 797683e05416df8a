"""Argument types of the operator commands: a bad number is argparse's error (usage, exit 2), never a
traceback (`stuck_runs --older-than 1e20` and `purge --older-than nan` would otherwise raise
OverflowError and ValueError from deep inside)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def duration(unit: str, most: float) -> Callable[[str], float]:
    """A number of `unit` up to `most` (a negative one is the command's own refusal)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not math.isfinite(value) or value > most:
            raise argparse.ArgumentTypeError(f"{text!r}: give 0 to {most:g} {unit}")
        return value

    return parse


SECONDS = duration("seconds", 100 * 365 * 86400)
DAYS = duration("days", 100 * 365)
