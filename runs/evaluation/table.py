"""A round's table of outcomes as plain text (the command prints it; the how-to shows one)."""

from __future__ import annotations

from core.ids import short_id
from runs.evaluation.selectors import RoundTable


def _cell(text: object, width: int) -> str:
    value = str(text)
    return value if len(value) <= width else value[: width - 1] + "…"


def round_table_text(table: RoundTable) -> str:
    header = ("original", "replay", "at", "original outcome", "replay outcome", "moves", "diverged at",
              "state diffs", "tokens o/r", "context tokens o/r")  # fmt: skip
    widths = (8, 8, 3, 36, 36, 9, 12, 11, 10, 18)
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    for c in table.rows:
        seqs = c.diverged_seq
        diverged = "-" if c.same_moves else f"o{seqs['original'] or '-'}/r{seqs['replay'] or '-'}"
        row = (
            short_id(c.original_run_id),
            short_id(c.replay_run_id),
            c.at_seq,
            c.original.outcome,
            c.replay.outcome,
            "same" if c.same_moves else "different",
            diverged,
            len(c.state_diff),
            f"{c.original.tokens}/{c.replay.tokens}",
            f"{c.original.context_tokens}/{c.replay.context_tokens}",
        )
        lines.append("  ".join(_cell(v, w).ljust(w) for v, w in zip(row, widths, strict=True)))
    t = table.totals()
    lines.append(
        f"{t['replays']} replays, {t['settled']} settled: {t['same_outcome']} with the original's outcome, "
        f"{t['same_moves']} with its moves; tokens {t['tokens_original']} → {t['tokens_replay']}, "
        f"cost ${t['cost_usd_original']} → ${t['cost_usd_replay']}, context tokens "
        f"{t['context_tokens_original']} → {t['context_tokens_replay']}"
        + (f"; {t['missing']} replay(s) or original(s) gone" if t["missing"] else "")
    )
    return "\n".join(lines)
