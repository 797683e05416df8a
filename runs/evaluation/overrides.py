"""What a replay may change, checked before anything is stored: a part's backend (a choice from a
fixed list, never a dotted path from a request), its model and endpoint, the prompt, tools' canned
answers. The result is what the step driver hands to core.backends and runs.engine.replays.

    {"backends": {"support_model": {"choice": "model", "options": {"model": "gpt-4o-mini"}}},
     "prompt": "You are terse.",
     "tools": {"lookup_order": [{"arguments": {"order_id": "ord-1"}, "result": {...}}]}}
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from core.errors import InvalidInput

# The parts a replay may swap, and what each choice builds. The "model" choices talk to an
# OpenAI-compatible endpoint through core.chat (base_url, model, api_key, timeout).
CHOICES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "support_model": {
        "rules": ("runs.workflows.support_model.RuleSupportAgent", {}),
        "rules-no-refunds": ("runs.workflows.support_model.RuleSupportAgent", {"propose_refunds": False}),
        "model": ("runs.workflows.support_model.ModelSupportAgent", {}),
    },
    "decider": {
        "rules": ("runs.workflows.refund.deciders.RuleDecider", {}),
        "model": ("runs.workflows.refund.deciders.ModelDecider", {}),
    },
    "compactor": {
        "extractive": ("runs.conversations.compaction.compactors.ExtractiveCompactor", {}),
        "model": ("runs.conversations.compaction.compactors.ModelCompactor", {}),
    },
}
MODEL_OPTIONS = ("model", "base_url", "timeout")
MAX_PROMPT_CHARS = 10_000
MAX_OVERRIDES_BYTES = 200_000


def _refuse(message: str, code: str = "invalid_overrides") -> InvalidInput:
    return InvalidInput(message, code=code)


def model_endpoints() -> list[str]:
    """The endpoints a replay may name: every one the settings configure for a part, and
    KEEPER_REPLAY_MODEL_URLS. A replay never makes a worker call an address of the request's choosing."""
    configured = [
        str(spec.get("OPTIONS", {}).get("base_url") or "").rstrip("/")
        for spec in settings.BACKENDS.values()
        if isinstance(spec, dict)
    ]
    return [u for u in [*configured, *(u.rstrip("/") for u in settings.KEEPER_REPLAY_MODEL_URLS)] if u]


def _model_options(part: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or set(raw) - set(MODEL_OPTIONS):
        raise _refuse(f"{part}'s options are {', '.join(MODEL_OPTIONS)}")
    configured = settings.BACKENDS.get(part, {}).get("OPTIONS", {})
    base_url = str(raw.get("base_url") or configured.get("base_url") or "").rstrip("/")
    model = raw.get("model") or configured.get("model") or settings.KEEPER_MODEL
    if not base_url:
        raise _refuse(
            f"{part}=model needs a base_url (one of KEEPER_REPLAY_MODEL_URLS)", "model_endpoint_missing"
        )
    if base_url not in model_endpoints():
        raise _refuse(
            f"{part}'s base_url {base_url[:200]!r} is not an endpoint the settings name "
            "(KEEPER_REPLAY_MODEL_URLS or a part's own)",
            "model_endpoint_not_allowed",
        )
    if not isinstance(model, str) or not 0 < len(model) <= 200:
        raise _refuse(f"{part}'s model must be a name of 1 to 200 characters")
    timeout = raw.get("timeout", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
        raise _refuse(f"{part}'s timeout must be a number of seconds in (0, 300]")
    return {"base_url": base_url, "model": model, "timeout": float(timeout)}


def _backends(raw: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The specs core.backends builds, and what the round shows (choices and models, no key)."""
    if not isinstance(raw, dict):
        raise _refuse("backends must be an object of part → {choice, options}")
    specs: dict[str, dict[str, Any]] = {}
    shown: dict[str, Any] = {}
    for part, chosen in raw.items():
        if part not in CHOICES:
            raise _refuse(
                f"a replay can change the parts {', '.join(CHOICES)}, not {str(part)[:100]!r}", "unknown_part"
            )
        if isinstance(chosen, str):
            chosen = {"choice": chosen}
        if not isinstance(chosen, dict) or set(chosen) - {"choice", "options"}:
            raise _refuse(f"{part} takes {{choice, options}}")
        choice = chosen.get("choice")
        if choice not in CHOICES[part]:
            raise _refuse(
                f"{part} is one of {', '.join(CHOICES[part])}, not {str(choice)[:100]!r}", "unknown_choice"
            )
        path, fixed = CHOICES[part][choice]
        if choice == "model":
            options = _model_options(part, chosen.get("options") or {})
            shown[part] = {"choice": choice, "options": options}
            specs[part] = {"BACKEND": path, "OPTIONS": options}  # the key is added when it runs
        else:
            if chosen.get("options"):
                raise _refuse(f"{part}={choice} takes no options")
            shown[part] = {"choice": choice}
            specs[part] = {"BACKEND": path, "OPTIONS": dict(fixed)}
    return specs, shown


def _tools(raw: Any) -> dict[str, list[dict[str, Any]]]:
    if not isinstance(raw, dict):
        raise _refuse("tools must be an object of tool name → [{arguments, result}]")
    tools: dict[str, list[dict[str, Any]]] = {}
    for name, answers in raw.items():
        if not isinstance(name, str) or not 0 < len(name) <= 100:
            raise _refuse("a tool's name is 1 to 100 characters")
        if not isinstance(answers, list) or not all(
            isinstance(a, dict) and set(a) <= {"arguments", "result"} and "result" in a
            and isinstance(a.get("arguments", {}), dict)
            for a in answers
        ):  # fmt: skip
            raise _refuse(f"tools.{name} must be a list of {{arguments (object), result}}")
        tools[name] = [{"arguments": a.get("arguments") or {}, "result": a["result"]} for a in answers]
    return tools


def overrides_parse(raw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the replay runs with, what is shown and stored for people): InvalidInput names the fault."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _refuse("overrides must be an object")
    if len(json.dumps(raw, default=str)) > MAX_OVERRIDES_BYTES:
        raise _refuse(f"overrides are at most {MAX_OVERRIDES_BYTES} bytes as JSON", "overrides_too_large")
    unknown = sorted(set(raw) - {"backends", "prompt", "tools"})
    if unknown:
        raise _refuse(
            f"unknown override(s) {', '.join(map(str, unknown))[:200]}; use backends, prompt, tools"
        )
    run_with: dict[str, Any] = {}
    shown: dict[str, Any] = {}
    if "backends" in raw:
        run_with["backends"], shown["backends"] = _backends(raw["backends"])
    if "prompt" in raw:
        prompt = raw["prompt"]
        if not isinstance(prompt, str) or not 0 < len(prompt) <= MAX_PROMPT_CHARS:
            raise _refuse(f"prompt must be a text of 1 to {MAX_PROMPT_CHARS} characters")
        run_with["prompt"] = shown["prompt"] = prompt
    if "tools" in raw:
        run_with["tools"] = shown["tools"] = _tools(raw["tools"])
    return run_with, shown


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise _refuse(f"a timeout is a number of seconds, not {value[:50]!r}") from None


def overrides_from_pairs(pairs: list[str]) -> dict[str, Any]:
    """`part=choice`, `part.option=value`, `prompt=text` (the command's and the console's form) as
    the overrides object."""
    raw: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise _refuse(f"an override is name=value, not {pair[:100]!r}")
        if name == "model":  # the support agent's model, the part people change most
            name = "support_model"
        if name.startswith("model."):
            name = "support_model." + name.removeprefix("model.")
        if name == "prompt":
            raw["prompt"] = value
            continue
        part, dot, option = name.partition(".")
        entry = raw.setdefault("backends", {}).setdefault(part, {})
        if dot:
            entry.setdefault("options", {})[option] = _number(value) if option == "timeout" else value
        else:
            entry["choice"] = value.strip()
    return raw
