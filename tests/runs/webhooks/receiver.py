"""A local HTTP receiver for webhook tests: fails the first N requests of each event, then accepts."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    fail_first: int = 0  # per event id: answer 500 to this many attempts before accepting
    hold: float = 0.0  # seconds to keep the first request waiting (a worker can be killed meanwhile)
    redirect_to: str = ""  # answer every request 307 to this URL
    requests: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.answered == 200]

    def accepted_per_event(self) -> Counter[str]:
        return Counter(r.headers["Keeper-Event-Id"] for r in self.accepted())

    def _answer(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            event_id = headers.get("Keeper-Event-Id", "")
            seen = sum(1 for r in self.requests if r.headers.get("Keeper-Event-Id") == event_id)
            first = not self.requests
            code = 500 if seen < self.fail_first else 200
            self.requests.append(Received(headers, body, code))
        if first and self.hold:
            self.arrived.set()
            self.release.wait(self.hold)
        return code

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                code = receiver._answer(dict(self.headers.items()), body)
                if receiver.redirect_to:
                    code = 307
                self.send_response(code)
                if receiver.redirect_to:
                    self.send_header("Location", receiver.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
