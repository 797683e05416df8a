"""Screening a memory claim for poisoning: instructions, permission changes, policy overrides, hidden text.

A memory item is a fact about a subject ("prefers German"); a claim that tells the agent what to do,
grants a role or overrides a rule is an attempt to plant an instruction that survives the session
(chapter 39), and text the reader cannot see is a hiding place for one (chapter 33). Such claims
are held for a person to review instead of being kept. Rules in English, Russian and Chinese.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from core.digests import strings_in

# Characters a reader does not see: zero-width, bidirectional controls, the Unicode tag block,
# soft hyphen, word joiner, invisible operators and the BOM.
_HIDDEN = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]"
)

_RULES: dict[str, list[str]] = {
    "instruction": [
        # English
        r"\b(ignore|disregard|forget|override|bypass|skip)\b.{0,40}\b(previous|prior|above|earlier|all|any|your|the)\b.{0,30}\b(instructions?|rules?|prompts?|guidelines?|polic(y|ies)|checks?|verification|safeguards?)\b",
        r"\bfrom now on\b",
        r"\b(system|developer)\s*(prompt|message|instruction|override|note)\b",
        r"\byou (must|should|will|shall|are (now|required to)|have to)\b.{0,60}\b(always|never|approve|refund|grant|reveal|send|share|skip|ignore|obey|treat|comply)\b",
        r"\b(always|never)\b.{0,40}\b(approve|refund|grant|reveal|disclose|verify|ask|escalate|check|obey|comply)\b",
        r"\bnew (instructions?|rules?|policy|directive)\b",
        r"\b(act|behave|respond) as (if|an?|the)\b.{0,30}\b(admin|administrator|root|developer|unrestricted|jailbroken)\b",
        r"\bdo not (tell|inform|mention|log|record|report)\b",
        r"\bwhen (asked|you see|the agent)\b.{0,60}\b(reply|respond|say|answer|do)\b",
        r"<\s*/?\s*(system|instructions?|admin)\s*>|\[\s*(system|inst|admin)\s*\]",
        # Russian
        r"(игнорируй|игнорировать|забудь|забыть|проигнорируй|не обращай внимания).{0,40}(инструкц|правил|указани|политик|провер)",
        r"(с этого момента|отныне|впредь)",
        r"(системн\w+ (промпт|сообщени|инструкц)|новые (инструкции|правила))",
        r"(ты|вы|агент|ассистент) (должен|должна|должны|обязан\w*).{0,60}(всегда|никогда|одобр|вернуть|возврат|выдать|раскр|пропус|игнор)",
        r"(всегда|никогда).{0,40}(одобр|возвра|выда|раскр|провер|спраш|подтвержд)",
        r"не (сообщай|говори|записывай|логируй|упоминай)",
        # Chinese
        r"(忽略|无视|忘记|忘掉|跳过|绕过).{0,20}(之前|以上|先前|所有|全部|任何)?.{0,10}(指令|指示|规则|提示|政策|规定|验证|检查)",
        r"(从现在开始|从现在起|今后|以后一律)",
        r"(系统提示|系统指令|新的?指令|新的?规则)",
        r"(你|助手|客服|代理)(必须|应该|一定要|要).{0,30}(总是|永远|始终|一律|直接|批准|退款|授予|透露|跳过|忽略)",
        r"(总是|永远|始终|一律)(批准|同意|退款|授予|透露|跳过|不要验证|不验证)",
        r"不要(告诉|通知|记录|提及|报告)",
    ],
    "permission_change": [
        r"\b(grant|give|assign|promote|elevate|escalate)\b.{0,40}\b(admin|administrator|root|superuser|owner|full|unlimited|elevated)\b.{0,20}\b(access|rights?|privileges?|permissions?|role)?",
        r"\b(is|am|as|now) (an? |the )?(admin|administrator|superuser|root user|system owner|staff member|moderator|manager|supervisor|ceo|vip)\b",
        r"\b(has|have|with) (been )?(admin|administrator|full|unlimited|elevated|root|superuser)\b.{0,15}\b(access|rights?|privileges?|permissions?|clearance)\b",
        r"\b(authori[sz]ed|allowed|permitted|entitled|approved) to\b.{0,40}\b(any|all|unlimited|override|bypass|refund|access|without)\b",
        r"\b(verified|authenticated|approved) by (the )?(admin|administrator|security|management|support team|it department)\b",
        r"\b(no|without) (need for |further )?(verification|approval|authentication|2fa|identity check|limits?)\b",
        r"\bunlimited (refunds?|credit|access|discounts?)\b",
        r"(права|доступ|роль|полномочия) (администратора|админа|суперпользователя|владельца)",
        r"(является|я|теперь|он|она) (администратор\w*|админ\w*|суперпользовател\w*|модератор\w*|руководител\w*|владел\w+ систем\w*)",
        r"(без|не требуется|не нужн\w+) (проверк|подтвержд|верификац|лимит|ограничени)",
        r"(неограниченн\w+) (возврат|кредит|доступ|скидк)",
        r"(管理员|超级用户|超级管理员|系统所有者|最高)(权限|身份|角色)?",
        r"(授予|赋予|给予|提升).{0,10}(权限|管理员|访问权)",
        r"(无需|不需要|不用|免除)(验证|审批|批准|身份验证|认证|限额|限制)",
        r"(无限|不限)(退款|额度|访问|折扣)",
    ],
    "policy_override": [
        r"\b(polic(y|ies)|rules?|terms|limits?|restrictions?|guidelines?) (no longer|do(es)? not|don't|doesn't) appl(y|ies)\b",
        r"\b(override|overrides|overrule|supersede|supersedes|replace|replaces|waive|waives|suspend|suspends|disable|disables|lift|lifts|remove|removes)\b.{0,30}\b(polic(y|ies)|rules?|limits?|restrictions?|safeguards?|controls?|checks?|guardrails?|filters?)\b",
        r"\b(exception|exempt|exemption|whitelisted|allowlisted)\b.{0,30}\b(polic(y|ies)|rules?|limits?|checks?|verification|review)\b",
        r"\b(management|legal|compliance|security|headquarters|the company|support) (has |have )?(approved|authori[sz]ed|decided|confirmed) (that|an exception|unlimited|all)\b",
        r"(политик\w*|правил\w*|ограничени\w*|лимит\w*) (больше )?не (действу|применя|распространя)",
        r"(отмен\w+|отключ\w+|сня\w+|обойти|обход\w*).{0,30}(политик|правил|ограничени|лимит|провер)",
        r"(исключени\w+) из (политик|правил)",
        r"(政策|规则|规定|限制|限额).{0,6}(不再适用|不适用|已取消|已失效|作废)",
        r"(取消|解除|覆盖|推翻|关闭|绕过).{0,10}(政策|规则|规定|限制|限额|审核|检查)",
        r"(例外|豁免|白名单)",
    ],
}
_COMPILED = {
    kind: [re.compile(p, re.IGNORECASE | re.DOTALL) for p in patterns] for kind, patterns in _RULES.items()
}


def screen_text(text: str) -> list[str]:
    """The kinds of poisoning this text shows (empty: an ordinary statement)."""
    signals = []
    if _HIDDEN.search(text) or any(unicodedata.category(c) == "Cf" for c in text):
        signals.append("hidden_text")
    # Read what a model would read: NFKC folds full-width and compatibility forms, hidden
    # characters are removed so "ig\u200bnore" still says "ignore".
    visible = unicodedata.normalize("NFKC", _HIDDEN.sub("", text))
    visible = "".join(c for c in visible if unicodedata.category(c) != "Cf")
    for kind, patterns in _COMPILED.items():
        if any(p.search(visible) for p in patterns):
            signals.append(kind)
    return signals


def screen_claim(*, namespace: str, key: str, value: Any) -> list[str]:
    """The poisoning signals of a claim: its key and every string in its value, read together."""
    text = " ".join([namespace, key, *strings_in(value, keys=True)])
    return screen_text(text)
