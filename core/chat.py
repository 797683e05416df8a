"""One client for OpenAI-compatible /chat/completions endpoints, with its timeout and error mapping.

Every model-backed part (decider, compactor, extractor) asks through it, so a refused connection, a
timeout, a broken HTTP reply, a non-2xx status or a body that is not the protocol's JSON all become
one error, ModelUnavailable, that the part turns into its own. A meter set around a call (chat_metered)
may refuse it beforehand and is told the reply's usage afterwards: that is how calls are charged.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import ApplicationError


class ModelUnavailable(ApplicationError):
    code = "model_unavailable"


@dataclass(frozen=True)
class ChatUsage:
    """What one call used: the provider's counts, or None where its reply gave none (the meter then
    counts the messages and the reply text with a tokenizer)."""

    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    messages: tuple[tuple[str, str], ...]
    reply: str


class ChatMeter(Protocol):
    """Told of every call made while it is set: `before` may refuse the call by raising."""

    def before(self, *, model: str) -> None: ...

    def after(self, *, usage: ChatUsage) -> None: ...


_meter: ContextVar[ChatMeter | None] = ContextVar("keeper_chat_meter", default=None)


@contextmanager
def chat_metered(meter: ChatMeter) -> Iterator[ChatMeter]:
    """Charge every call made inside the block to `meter` (the innermost meter wins)."""
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)


def chat_meter_current() -> ChatMeter | None:
    return _meter.get()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def chat_usage(*, model: str, messages: list[dict[str, str]], answer: dict[str, Any]) -> ChatUsage:
    """The reply's `usage` (prompt and completion tokens) with what a tokenizer would need without it."""
    raw = answer.get("usage")
    usage: dict[str, Any] = raw if isinstance(raw, dict) else {}
    try:
        reply = str(answer["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        reply = ""
    return ChatUsage(
        model=model,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        messages=tuple((str(m.get("role", "")), str(m.get("content", ""))) for m in messages),
        reply=reply,
    )


def chat_complete(
    *,
    base_url: str,
    model: str,
    api_key: str,
    messages: list[dict[str, str]],
    timeout: float,
    response_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """POST {base_url}/chat/completions (temperature 0) and return the decoded reply object.

    The current meter (chat_metered) is asked before the request and given the usage after it.
    """
    meter = _meter.get()
    if meter is not None:
        meter.before(model=model)
    body: dict[str, Any] = {"model": model, "temperature": 0, "messages": messages}
    if response_format is not None:
        body["response_format"] = response_format
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = f"{base_url.rstrip('/')}/chat/completions"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a non-2xx status; before URLError, its base class
        raise ModelUnavailable(f"the model endpoint answered HTTP {exc.code}") from None
    except (OSError, http.client.HTTPException) as exc:
        # URLError, refused connections and timeouts are OSErrors; a broken reply is an HTTPException
        raise ModelUnavailable(f"the model endpoint could not be reached: {exc!r}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ModelUnavailable(f"the model endpoint's reply is not JSON: {exc!r}") from None
    if not isinstance(answer, dict):
        raise ModelUnavailable(f"the model endpoint's reply is not a JSON object: {str(answer)[:200]}")
    if meter is not None:
        meter.after(usage=chat_usage(model=model, messages=messages, answer=answer))
    return answer


def chat_json(
    *, base_url: str, model: str, api_key: str, messages: list[dict[str, str]], timeout: float
) -> Any:
    """Ask for a JSON object (response_format json_object) and return the first choice's content, decoded."""
    answer = chat_complete(
        base_url=base_url,
        model=model,
        api_key=api_key,
        messages=messages,
        timeout=timeout,
        response_format={"type": "json_object"},
    )
    try:
        return json.loads(answer["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ModelUnavailable(f"the model's reply has no JSON content: {exc!r}") from None
