"""Which sensitive categories a claim touches: its namespace and key read as words, however spelled.

A category is recognised in the namespace and in the key, in any case, across the separators
`. / - _ :`, spaces and camelCase, in a child namespace (`health.conditions`) and through its
synonyms (health: medical, diagnosis, condition, medication...), in English, Russian and Chinese.
The write policy (memory/policy.py) and the extractors ask this module; nothing else keeps a list.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

from core.digests import strings_in

STATE_OF_MIND = "state_of_mind"

# A term is matched against the words of a name:
#   "~stem"  anywhere inside a word (long stems nothing innocent contains: "mentalhealth", "bisexual")
#   "stem*"  at the start of a word ("conditions", "moody")
#   "word"   the word itself, or with a plural "s"/"es"
#   "a b"    consecutive words, each by the rules above ("trade union", "sex life")
# Chinese has no word breaks: its terms are matched anywhere in the text.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "health": (
        "~health",
        "~medic",
        "~diagnos",
        "condition*",
        "illness*",
        "~disease",
        "sick*",
        "~symptom",
        "~allerg",
        "~disabilit",
        "~pregnan",
        "~therap",
        "prescription*",
        "mental*",
        "~psychiatr",
        "~diabet",
        "med",
        "rx",
        "hiv",
        "blood type",
        "blood group",
        "wheelchair*",
        "~здоров",
        "~медиц",
        "~диагноз",
        "~болезн",
        "~заболев",
        "~лекарств",
        "~инвалид",
        "~беремен",
        "~аллерг",
        "~лечени",
        "健康",
        "医疗",
        "医学",
        "疾病",
        "病史",
        "病情",
        "生病",
        "患病",
        "诊断",
        "药物",
        "用药",
        "服药",
        "残疾",
        "怀孕",
        "过敏",
        "治疗",
    ),
    "religion": (
        "~religi",
        "faith*",
        "belief*",
        "believer*",
        "~church",
        "~mosque",
        "~synagog",
        "worship*",
        "~spiritual",
        "denomination*",
        "christian*",
        "catholic*",
        "protestant*",
        "muslim*",
        "islam*",
        "jewish",
        "judaism",
        "hindu*",
        "buddhis*",
        "atheis*",
        "~религи",
        "~вероиспов",
        "вера",
        "~церков",
        "~конфесси",
        "宗教",
        "信仰",
        "教会",
    ),
    "sexual_orientation": (
        "~sexual",
        "sex life",
        "~lgbt",
        "gay",
        "lesbian",
        "~transgender",
        "orientation*",
        "~сексуальн",
        "~ориентац",
        "性取向",
        "性生活",
        "同性恋",
    ),
    "politics": (
        "~politic",
        "~ideolog",
        "vote*",
        "voting",
        "~политич",
        "~партийн",
        "政治",
        "党派",
        "政党",
    ),
    "ethnicity": (
        "~ethnic",
        "race",
        "~racial",
        "national origin*",
        "~этнич",
        "~национальност",
        "раса",
        "~расов",
        "民族",
        "种族",
    ),
    "trade_union": (
        "trade union*",
        "labor union*",
        "labour union*",
        "union member*",
        "~tradeunion",
        "~unionmember",
        "unionis*",
        "unioniz*",
        "~профсоюз",
        "工会",
    ),
    "biometrics": (
        "~biometr",
        "~fingerprint",
        "~faceprint",
        "~voiceprint",
        "face id",
        "retina*",
        "~биометр",
        "отпечат* пальц*",
        "生物特征",
        "生物识别",
        "指纹",
        "人脸",
        "虹膜",
    ),
    "genetics": (
        "~genetic",
        "~genom",
        "dna",
        "gene",
        "~генетич",
        "~геном",
        "днк",
        "基因",
        "遗传",
    ),
    STATE_OF_MIND: (
        "mood*",
        "~emotion",
        "feeling*",
        "feel",
        "~sentiment",
        "attitude*",
        "temper*",
        "angry",
        "anger",
        "angered",
        "upset*",
        "~frustrat",
        "~anxi",
        "stress*",
        "~depress",
        "mental state*",
        "~mentalstate",
        "state of mind",
        "~stateofmind",
        "mindset*",
        "~psycholog",
        "~настроени",
        "~эмоци",
        "~чувств",
        "злост*",
        "~раздраж",
        "~тревож",
        "~депресс",
        "душевн*",
        "~психолог",
        "情绪",
        "心情",
        "情感",
        "心理",
        "精神状态",
        "生气",
        "愤怒",
        "焦虑",
        "抑郁",
        "态度",
    ),
}

# Words in a value that say how a person feels: a claim someone else makes with them in it is a
# reading of that person's state of mind ("the user is angry"), whatever its namespace.
STATE_OF_MIND_WORDS: tuple[str, ...] = (
    "angry",
    "anger",
    "angered",
    "furious",
    "upset",
    "annoyed",
    "irritated",
    "~frustrat",
    "sad",
    "unhappy",
    "~depress",
    "~anxi",
    "stressed",
    "nervous",
    "afraid",
    "scared",
    "emotional",
    "~emotion",
    "mood*",
    "hostile",
    "agitated",
    "irate",
    "зол",
    "злой",
    "злая",
    "злится",
    "~рассерж",
    "~сердит",
    "~раздраж",
    "~расстро",
    "~тревож",
    "~нервнич",
    "~грустн",
    "~депресс",
    "~агрессив",
    "~настроени",
    "~эмоци",
    "生气",
    "愤怒",
    "恼火",
    "不高兴",
    "难过",
    "伤心",
    "焦虑",
    "紧张",
    "沮丧",
    "抑郁",
    "情绪",
    "心情",
    "烦躁",
)

# Phrases whose words would otherwise read as a category ("terms and conditions" is no health).
_NOT_CATEGORIES = re.compile(r"(?<![^ ])terms (?:and )?conditions?(?![^ ])")

_CAMEL = re.compile(r"(?<=[a-zа-яё0-9])(?=[A-ZА-ЯЁ])")
_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def words_of(text: str) -> list[str]:
    """The words of a name or a text: NFKC, camelCase split, case folded; every separator breaks."""
    text = unicodedata.normalize("NFKC", text)
    return [w.casefold() for w in _WORD.findall(_CAMEL.sub(" ", text))]


def _term_pattern(term: str) -> str:
    """A term as a pattern over words joined by single spaces (see CATEGORIES for the notation)."""
    if _CJK.search(term) or (term.startswith("~") and " " not in term):
        return re.escape(term.lstrip("~"))  # anywhere: a word holds it, or Chinese, which has no words
    parts = []
    for part in term.split(" "):
        if part.startswith("~"):
            parts.append(rf"[^ ]*{re.escape(part[1:])}[^ ]*")
        elif part.endswith("*"):
            parts.append(rf"{re.escape(part[:-1])}[^ ]*")
        else:
            parts.append(rf"{re.escape(part)}(?:e?s)?")
    return r"(?<![^ ])" + " ".join(parts) + r"(?![^ ])"


@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """One pattern per category: its terms as alternatives (one search a category and a name)."""
    return tuple(
        (category, re.compile("|".join(_term_pattern(t) for t in terms)))
        for category, terms in CATEGORIES.items()
    )


@lru_cache(maxsize=1)
def _state_of_mind_words() -> re.Pattern[str]:
    return re.compile("|".join(_term_pattern(t) for t in STATE_OF_MIND_WORDS))


def _joined(text: str) -> str:
    return " ".join(words_of(text))


def categories_of(*names: str) -> frozenset[str]:
    """The sensitive categories these names (a namespace, a key) touch; empty: none."""
    texts = [_NOT_CATEGORIES.sub(" ", _joined(name)) for name in names]
    return frozenset(category for category, pattern in _compiled() if any(pattern.search(t) for t in texts))


def claim_categories(*, namespace: str, key: str) -> frozenset[str]:
    """The sensitive categories of a claim: what its namespace and its key name."""
    return categories_of(namespace, key)


def states_of_mind_in(value: Any) -> bool:
    """Whether a value's texts (its keys included) say how a person feels."""
    pattern = _state_of_mind_words()
    return any(pattern.search(_joined(text)) for text in strings_in(value, keys=True))


def namespace_path(namespace: str) -> tuple[str, ...]:
    """A namespace as a path of folded words: "Health.Conditions", "health/conditions" and
    "health:conditions" are all ("health", "conditions"); the consent policy matches its prefixes."""
    return tuple(words_of(namespace))
