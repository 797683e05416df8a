"""A local HTTP server that speaks POST /v1/chat/completions like an OpenAI-compatible provider.

core.chat's client and the model-backed parts are tested against it: the real client, the real
protocol, a scripted reply (or a scripted failure: a status, raw bytes, a delay).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class ChatServer:
    """Speaks POST /v1/chat/completions like an OpenAI-compatible provider, with a scripted reply."""

    def __init__(self) -> None:
        self.reply: Any = None
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.raw: bytes | None = None  # written instead of an HTTP response, e.g. a broken status line
        self.delay = 0.0  # seconds before answering
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                time.sleep(outer.delay)
                if outer.raw is not None:
                    self.wfile.write(outer.raw)
                    self.close_connection = True
                    return
                data = outer.reply if isinstance(outer.reply, bytes) else json.dumps(outer.reply).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, content: str) -> None:
        self.reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
        }


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.server.shutdown()
    server.server.server_close()
