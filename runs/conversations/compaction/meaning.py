"""Does a summary's fact keep the meaning of the events it cites? Its polarity, its conditions and
its amounts with their currency, checked by code against the cited sentence.

facts_check (services.py) asks whether a fact's values are in its events; this asks whether the
fact says what they say: "the customer does not want a refund" summarised as "wants a refund" keeps
every value and flips the meaning. For each fact the cited clause that shares most of its words is
found; a fact whose words match no clause well enough is prose no code can judge, and passes.
- polarity: the fact and that clause must agree on negation (not, never, no, don't..., не, нет,
  никогда..., 不, 没, 别...; and the verbs of refusal: decline, refuse, reject, отказ, 拒绝);
- conditions: a sentence that holds a condition (if, unless, only if, provided..., если, только
  если, при условии..., 如果, 除非, 只要...) is not carried by a fact that holds none;
- amounts: every amount the fact names with a currency is in the cited events with that currency,
  and an amount the events give with a currency keeps it in the fact.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from runs.conversations.compaction.compactors import _major, _money_in_text, _sentences, carry_extract

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_CJK = re.compile(r"[\u3400-\u9fff]")
_NEGATIONS = {
    *("not", "no", "never", "nothing", "nobody", "none", "neither", "nor", "without", "cannot"),
    *("не", "нет", "никогда", "ни", "ничего", "никто", "без", "нельзя"),
}
_NEGATION_STEMS = ("declin", "refus", "reject", "отказ")
_CJK_NEGATIONS = ("不", "没", "別", "别", "无", "未", "拒绝")
_CONDITION = re.compile(
    r"\b(?:if|unless|provided|providing|as long as|in case|only when|on condition)\b"
    r"|\b(?:если|только если|при условии|в случае|пока не)\b|如果|除非|只要|只有|假如|要是",
    re.IGNORECASE,
)
_CLAUSE = re.compile(r"[,;:—–]|\b(?:but|however|instead|just|rather|а|но|однако|зато)\b|但|但是|而是|不过")
_STOP = {
    *("a", "an", "the", "to", "of", "and", "or", "in", "on", "at", "for", "with", "is", "are", "was"),
    *("were", "be", "it", "this", "that", "i", "me", "my", "you", "your", "he", "she", "they", "we"),
    *("user", "assistant", "customer", "please", "do", "does", "did", "would", "will", "just", "also"),
    *("и", "в", "на", "с", "по", "я", "мне", "мой", "вы", "он", "она", "это", "что", "пожалуйста"),
    *("клиент", "клиентка", "пользователь"),
}
MATCH_MIN = 0.5  # the share of a fact's words a clause must hold to be the one it speaks for


def _words(text: str) -> list[str]:
    return [w.casefold().replace("’", "'") for w in _WORD.findall(unicodedata.normalize("NFKC", text))]


def _stem(word: str) -> str:
    if "а" <= word[:1] <= "я" or word[:1] == "ё":
        return word[:3]  # Russian inflects the ending: its first letters find the same word
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)][:6]
    return word[:6]


def _content(text: str) -> set[str]:
    """A text's content words, stemmed; Chinese as its characters (no word breaks to go by)."""
    words = {
        _stem(w) for w in _words(text) if w not in _STOP and w not in _NEGATIONS and not w.endswith("n't")
    }
    return {w for w in words if not _CJK.search(w)} | {
        c for c in text if _CJK.match(c) and c not in "不没别無无未"
    }


def _negated(text: str) -> bool:
    """An odd number of negations ("I don't not want it" is a yes)."""
    words = _words(text)
    count = sum(1 for w in words if w in _NEGATIONS or w.endswith("n't") or w.startswith(_NEGATION_STEMS))
    count += sum(text.count(c) for c in _CJK_NEGATIONS)
    return count % 2 == 1


def _clauses(sentence: str) -> list[str]:
    parts = [p.strip() for p in _CLAUSE.split(sentence) if p and p.strip()]
    return parts or [sentence]


def _event_texts(event: dict[str, Any]) -> Iterator[str]:
    payload = event.get("payload")
    if not isinstance(payload, dict):
        return
    for key in ("content", "preview", "note", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            yield value


def _best(fact: str, events: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    """(sentence, clause) of the cited events the fact speaks for, or None if none is close enough."""
    wanted = _content(fact)
    if not wanted:
        return None
    best: tuple[float, str, str] | None = None
    for event in events:
        for text in _event_texts(event):
            for sentence in _sentences(text):
                for clause in _clauses(sentence):
                    have = _content(clause)
                    shared = len(wanted & have)
                    if not shared or shared / len(wanted) < MATCH_MIN:
                        continue
                    score = shared / len(wanted | have)
                    if best is None or score > best[0]:
                        best = (score, sentence, clause)
    return None if best is None else (best[1], best[2])


def _amounts(text: str) -> set[tuple[int, str]]:
    return set(_money_in_text(text))


def _bare_numbers(text: str) -> set[Decimal]:
    """Numbers standing alone in the fact, with no currency next to them (not a part of an id)."""
    found = set()
    for match in re.finditer(r"(?:(?<=[\s(])|^)\d+(?:[.,]\d+)?(?=$|[\s.,;:!?)])", text):
        if any(_money_in_text(text[max(0, match.start() - 2) : match.end() + 5])):
            continue
        try:
            found.add(Decimal(match.group().replace(",", ".")).normalize())
        except InvalidOperation:
            continue
    return found


def fact_meaning_problem(fact: dict[str, Any], events: Sequence[dict[str, Any]]) -> str | None:
    """Why this fact does not say what the events it cites say, or None."""
    text = str(fact.get("text") or "")
    events_money = {(m["amount_minor"], m["currency"]) for m in carry_extract(list(events))["money"]}
    for amount, currency in sorted(_amounts(text)):
        if (amount, currency) not in events_money:
            written = {f"{_major(a, c)} {c}" for a, c in events_money if a == amount}
            where = f" (they say {', '.join(sorted(written))})" if written else ""
            return f"amount: {_major(amount, currency)} {currency} is not in the events it cites{where}"
    for number in _bare_numbers(text):
        for amount, currency in sorted(events_money):
            if Decimal(_major(amount, currency)).normalize() == number:
                return f"amount: {number} lost its currency ({_major(amount, currency)} {currency} in the events)"
    conditional = bool(_CONDITION.search(text))
    for part in _clauses(text):
        match = _best(part, events)
        if match is None:
            continue  # prose no code can judge
        sentence, clause = match
        if _negated(part) != _negated(clause):
            said_as = "negated" if _negated(clause) else "affirmed"
            return f"polarity: the events {said_as} it: {clause[:160]!r}"
        if _CONDITION.search(sentence) and not conditional:
            return f"condition: the events say it under a condition: {sentence[:160]!r}"
    return None


def facts_meaning_check(
    facts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, changed): a changed fact says something else than the events it cites (with why)."""
    by_seq = {e["seq"]: e for e in events}
    kept: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for fact in facts:
        first, last = fact["source_seq"]
        cited = [by_seq[s] for s in range(first, last + 1) if s in by_seq]
        problem = fact_meaning_problem(fact, cited)
        if problem is None:
            kept.append(fact)
        else:
            changed.append({**fact, "why": f"meaning: {problem}"})
    return kept, changed
