"""core.chat's client against a local OpenAI-protocol server: what it sends, and every failure mapped once."""

from __future__ import annotations

import json

import pytest

from core.chat import ModelUnavailable, chat_complete, chat_json
from core.errors import ApplicationError

MESSAGES = [{"role": "system", "content": "Answer JSON."}, {"role": "user", "content": "hi"}]


def ask(chat, **overrides):
    kwargs = {"base_url": chat.url + "/", "model": "small-model", "api_key": "k-test", "messages": MESSAGES}
    return chat_json(**{**kwargs, "timeout": 5, **overrides})


def test_it_posts_the_protocol_and_returns_the_decoded_content(chat):
    chat.answer(json.dumps({"outcome": "refund"}))
    assert ask(chat) == {"outcome": "refund"}
    [sent] = chat.requests
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer k-test"
    assert sent["body"] == {
        "model": "small-model",
        "temperature": 0,
        "messages": MESSAGES,
        "response_format": {"type": "json_object"},
    }


def test_without_a_key_or_a_format_it_sends_neither(chat):
    chat.answer("plain words")
    answer = chat_complete(base_url=chat.url, model="m", api_key="", messages=MESSAGES, timeout=5)
    assert answer["choices"][0]["message"]["content"] == "plain words"
    assert chat.requests[0]["auth"] is None and "response_format" not in chat.requests[0]["body"]


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ({"status": 500}, "HTTP 500"),
        ({"status": 429}, "HTTP 429"),
        ({"raw": b"garbage\r\n\r\n"}, "BadStatusLine"),  # an http.client.HTTPException, not an OSError
        (
            {"raw": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"},
            "IncompleteRead",
        ),
        ({"reply": b"not json"}, "not JSON"),
        ({"reply": [1, 2]}, "not a JSON object"),
        ({"reply": {"choices": []}}, "no JSON content"),
        ({"content": "not json"}, "no JSON content"),
    ],
)
def test_every_broken_reply_is_one_narrow_error(chat, script, reason):
    chat.answer(script.pop("content", "{}"))
    for name, value in script.items():
        setattr(chat, name, value)
    with pytest.raises(ModelUnavailable, match=reason) as caught:
        ask(chat)
    assert isinstance(caught.value, ApplicationError) and caught.value.code == "model_unavailable"


def test_a_slow_endpoint_times_out(chat):
    chat.answer("{}")
    chat.delay = 1.0
    with pytest.raises(ModelUnavailable, match="timed out"):
        ask(chat, timeout=0.2)


def test_an_unreachable_endpoint_is_unavailable(chat):
    url = chat.url
    chat.server.shutdown()
    chat.server.server_close()
    with pytest.raises(ModelUnavailable, match="could not be reached"):
        ask(chat, base_url=url)
