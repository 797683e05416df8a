"""Reaching the client's TCP socket from inside a view, so drop_after_apply can hang up without answering."""

from __future__ import annotations

import contextlib
import io
import socket
from typing import Any

from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest


def client_socket(request: HttpRequest) -> socket.socket | None:
    """The connection under gunicorn's sync workers, runserver and live_server; None elsewhere.

    Under wsgiref (runserver, pytest-django's live_server) environ["wsgi.input"] is Django's
    LimitedStream, which keeps only the bound read method of the handler's rfile: a BufferedReader
    over socket.SocketIO, whose ._sock is the connection. ASGI, uWSGI and the test client give None,
    and the caller answers 502 drop_unsupported instead.
    """
    candidate: Any = request.META.get("gunicorn.socket")
    if isinstance(candidate, socket.socket):
        return candidate
    candidate = request.META.get("wsgi.input")
    while candidate is not None and not isinstance(candidate, socket.socket):
        candidate = _wrapped(candidate)
    return candidate


def _wrapped(stream: Any) -> Any:
    """The object one layer below a stream, or None where the chain ends."""
    if isinstance(stream, LimitedStream):
        # Django's LimitedStream keeps the wrapped stream's read method; the stubs omit the attribute.
        return getattr(stream._read, "__self__", None)  # type: ignore[attr-defined]
    if isinstance(stream, io.BufferedReader):
        return stream.raw
    if isinstance(stream, socket.SocketIO):
        return getattr(stream, "_sock", None)
    return None


def connection_drop(sock: socket.socket) -> None:
    """Hang up: the client sees the connection close with no response at all.

    shutdown() sends the FIN at once even though the server's rfile/wfile still hold the socket. The
    socket is left to the server to close: its write of the response then fails with a broken pipe,
    which gunicorn and wsgiref both take for a client gone (a closed descriptor would be a "Socket
    error" with a traceback in gunicorn's log instead).
    """
    with contextlib.suppress(OSError):  # the client has gone already: dropped either way
        sock.shutdown(socket.SHUT_RDWR)
