"""What a step decided, in the words every driver uses: Next, Suspend, Complete or Fail.

Keeper's own steps return these; an outside worker sends the same four over HTTP (`kind` is the
lower-case class name), and the Python client (clients/python) names them alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

State = dict[str, Any]

KINDS = ("next", "suspend", "complete", "fail")


@dataclass(frozen=True)
class Next:
    state: State
    step: str
    # What this step said, when it is a conversation event (e.g. "assistant_message" with its
    # content): committed as that event instead of a plain step_completed.
    say: tuple[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class Suspend:
    """Wait for a human or an outside event; resume continues at `step` (default: the same step).

    With `wake_at` (a durable timer) the run asks to be resumed at that time by itself: the sweep
    wakes it, through resume verification like any resume, even after every worker restarted.
    """

    state: State
    reason: str
    detail: str = ""
    step: str | None = None
    wake_at: datetime | None = None


@dataclass(frozen=True)
class Complete:
    state: State
    result: Any = None


@dataclass(frozen=True)
class Fail:
    state: State
    code: str
    detail: str = ""


Outcome = Next | Suspend | Complete | Fail
