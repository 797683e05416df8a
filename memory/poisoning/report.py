"""The poisoning corpus scored against the screen: share of attempts held, share of ordinary statements held."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from memory.poisoning.screen import screen_text

CORPUS = Path(__file__).with_name("corpus.jsonl")


@dataclass
class Report:
    attempts: int = 0
    blocked: int = 0
    ordinary: int = 0
    held_back: int = 0
    by_lang: Counter[str] = field(default_factory=Counter)  # "<lang> attempts", "<lang> blocked", ...
    missed: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    @property
    def blocked_share(self) -> float:
        return self.blocked / self.attempts if self.attempts else 0.0

    @property
    def held_back_share(self) -> float:
        return self.held_back / self.ordinary if self.ordinary else 0.0


def poisoning_report(*, corpus: Path = CORPUS) -> Report:
    report = Report()
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        held = bool(screen_text(row["text"]))
        if row["label"] == "poisoning":
            report.attempts += 1
            report.blocked += held
            report.by_lang[f"{row['lang']} attempts"] += 1
            report.by_lang[f"{row['lang']} blocked"] += held
            if not held:
                report.missed.append(row["text"])
        else:
            report.ordinary += 1
            report.held_back += held
            report.by_lang[f"{row['lang']} ordinary"] += 1
            report.by_lang[f"{row['lang']} held back"] += held
            if held:
                report.false_positives.append(row["text"])
    return report
