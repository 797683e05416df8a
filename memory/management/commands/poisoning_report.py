"""python manage.py poisoning_report: how much of the labelled poisoning corpus the memory screen holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.poisoning.report import CORPUS, poisoning_report


class Command(BaseCommand):
    help = (
        "Score the memory poisoning screen on a labelled corpus (share blocked, share of ordinary held back)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--corpus", default=str(CORPUS), help="a JSONL file of {label, lang, kind, text}")
        parser.add_argument("--show", action="store_true", help="list the misses and the false positives")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["corpus"])
        if not path.is_file():
            raise CommandError(f"no corpus at {path}")
        try:
            r = poisoning_report(corpus=path)
        except (ValueError, KeyError) as exc:
            raise CommandError(f"{path} is not a labelled corpus: {exc}") from None
        self.stdout.write(
            f"poisoning attempts blocked: {r.blocked}/{r.attempts} ({r.blocked_share:.1%})\n"
            f"ordinary statements held back: {r.held_back}/{r.ordinary} ({r.held_back_share:.1%})"
        )
        for lang in sorted({k.split()[0] for k in r.by_lang}):
            self.stdout.write(
                f"  {lang:6} blocked {r.by_lang[f'{lang} blocked']}/{r.by_lang[f'{lang} attempts']}, "
                f"held back {r.by_lang[f'{lang} held back']}/{r.by_lang[f'{lang} ordinary']}"
            )
        if options["show"]:
            for text in r.missed:
                self.stdout.write(f"missed: {text}")
            for text in r.false_positives:
                self.stdout.write(f"held back: {text}")
