"""One client for OpenAI-compatible /chat/completions endpoints, with its timeout and error mapping.

Every model-backed part (decider, compactor, extractor) asks through it, so a refused connection, a
timeout, a broken HTTP reply, a non-2xx status or a body that is not the protocol's JSON all become
one error, ModelUnavailable, that the part turns into its own.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

from core.errors import ApplicationError


class ModelUnavailable(ApplicationError):
    code = "model_unavailable"


def chat_complete(
    *,
    base_url: str,
    model: str,
    api_key: str,
    messages: list[dict[str, str]],
    timeout: float,
    response_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """POST {base_url}/chat/completions (temperature 0) and return the decoded reply object."""
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
