"""Structured logs: a JSON formatter (one object per line) and the run / tenant context it carries.

The engine sets the context around a step (`log_context`); `RunContextFilter` copies it onto every
record, so a step's own `logger.info(...)` says which run and tenant it belongs to. Access lines
never carry query values (subject ids, search text): `request_line_redact` keeps only their names.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_run_id: ContextVar[str | None] = ContextVar("keeper_log_run_id", default=None)
_tenant_id: ContextVar[str | None] = ContextVar("keeper_log_tenant_id", default=None)

LOG_FORMATS = ("json", "plain")


@contextmanager
def log_context(*, run_id: object = None, tenant_id: object = None) -> Iterator[None]:
    """Records logged inside carry this run and tenant (a None keeps what an outer context set)."""
    tokens = []
    if run_id is not None:
        tokens.append((_run_id, _run_id.set(str(run_id))))
    if tenant_id is not None:
        tokens.append((_tenant_id, _tenant_id.set(str(tenant_id))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def log_tenant_current() -> str | None:
    """The tenant the current request or task is for, as the log context has it (None: unknown)."""
    return _tenant_id.get()


def log_request_tenant(tenant_id: object) -> None:
    """The tenant of the request being served: every record until the request ends carries it."""
    _tenant_id.set(str(tenant_id))


class LogContextMiddleware:
    """Each request starts with no run or tenant in the log context, so a thread that serves many
    requests never stamps one request's tenant on the next one's lines. The context is not cleared
    at the end: Django logs a failed response (django.request) after the middleware has returned,
    and that line should still name the tenant."""

    def __init__(self, get_response: Any):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        _run_id.set(None)
        _tenant_id.set(None)
        return self.get_response(request)


REQUEST_LINE = re.compile(r"^(?P<head>\S+ [^?\s]*)\?(?P<query>\S*)(?P<tail>.*)$", re.DOTALL)


def query_redact(query: str) -> str:
    """`subject_id=c-1&query=late+parcel` -> `subject_id=*&query=*`: which parameters, never their values."""
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    return "&".join(f"{name}=*" for name in names)


# A subject's id in a path (`/api/v1/memory/subjects/<subject>/memory.md`), percent-encoded or not:
# all of it up to the last `/memory.md` (a decoded id may hold "/"), else the segment after `/subjects/`.
SUBJECT_SEGMENT = re.compile(r"(/subjects/)(?:[^?\s]*(?=/memory\.md)|[^/?\s]+)")
# A document's id (`/api/v1/retrieval/documents/<id>/`, `.../<id>/acl`), which may name a person
# ("transcript-王芳") and hold "/": all of it up to the route's own end.
DOCUMENT_SEGMENT = re.compile(
    r"(/retrieval/documents/)(?:[^?\s]*(?=/acl(?:[?\s]|$))|[^?\s]*(?=/(?:[?\s]|$))|[^?\s]+)"
)


# A retrieval principal (`/api/v1/retrieval/principals/user:jane.doe@example.com/`), which names a person.
PRINCIPAL_SEGMENT = re.compile(r"(/retrieval/principals/)[^/?\s]+")


# What a path may keep: a UUID, a number, or a word one of the URLconf's routes spells out.
_KEPT_SEGMENT = re.compile(
    r"[0-9]+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\*?"
)
_ROUTE_SYNTAX = re.compile(r"[<>()\[\]^$\\?*+|{}]")
_route_words: frozenset[str] | None = None


def _words_of(patterns: Any) -> set[str]:
    words: set[str] = set()
    for pattern in patterns:
        for segment in str(pattern.pattern).split("/"):
            if segment and not _ROUTE_SYNTAX.search(segment):
                words.add(segment)
        if hasattr(pattern, "url_patterns"):
            words |= _words_of(pattern.url_patterns)
    return words


def route_words() -> frozenset[str] | None:
    """Every literal path segment of the URLconf's routes (None before Django is set up)."""
    global _route_words
    if _route_words is None:
        try:
            from django.urls import get_resolver

            _route_words = frozenset(_words_of(get_resolver().url_patterns))
        except Exception:  # settings not configured yet (gunicorn's master): the named routes only
            return None
    return _route_words


def path_redact(path: str) -> str:
    """`/api/v1/memory/subjects/c-1/memory.md` -> `/api/v1/memory/subjects/*/memory.md`: every
    segment a caller chose (a subject, a document, a principal, an operation, a query or a signal's
    name) becomes `*`; the route's own words, UUIDs and numbers stay. Such segments can name a
    person: an operation keyed note:cust-7781, a signal named after an e-mail address."""
    for segment in (SUBJECT_SEGMENT, DOCUMENT_SEGMENT, PRINCIPAL_SEGMENT):
        path = segment.sub(r"\1*", path)
    words = route_words()
    if words is None:
        return path

    def segments(found: re.Match[str]) -> str:
        if found[0].startswith("/static/"):
            return found[0]
        return "/".join(p if p in words or _KEPT_SEGMENT.fullmatch(p) else "*" for p in found[0].split("/"))

    # Each path in the text (a bare path, or the one in a request line), up to its query.
    return _PATH.sub(segments, path)


_PATH = re.compile(r"(?<!\S)/[^\s?]*")


def request_line_redact(line: str) -> str:
    """`GET /api/v1/memory/items/?subject_id=c-1 HTTP/1.1` -> `GET /api/v1/memory/items/?subject_id=* HTTP/1.1`,
    and a subject's id in the path as `*` too."""
    match = REQUEST_LINE.match(line)
    if match is None:
        return path_redact(line)
    return f"{path_redact(match['head'])}?{query_redact(match['query'])}{match['tail']}"


class AccessLineFilter(logging.Filter):
    """runserver's access lines (logger `django.server`, the request line as the first argument)
    without query values; other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "django.server" and isinstance(record.args, tuple) and record.args:
            first = record.args[0]
            if isinstance(first, str):
                record.args = (request_line_redact(first), *record.args[1:])
        return True


class RunContextFilter(logging.Filter):
    """Adds `run_id` and `tenant_id` (None when unknown) to every record; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "run_id", None) is None:
            record.run_id = _run_id.get()
        if getattr(record, "tenant_id", None) is None:
            record.tenant_id = _tenant_id.get()
        return True


# The plain line format (KEEPER_LOG_FORMAT=plain), for the application and gunicorn alike.
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, run_id / tenant_id when known,
    and the exception's traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("run_id", "tenant_id"):
            value = getattr(record, key, None)
            if value is None:
                value = (_run_id if key == "run_id" else _tenant_id).get()
            if value is not None:
                entry[key] = str(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class ForbiddenLineFilter(logging.Filter):
    """Django logs every 403 (a PermissionDenied) with its traceback; a refusal is not a bug, so it
    stays one WARNING line (`Forbidden (Permission denied): /path`) without the traceback. The
    paths of django.request's lines leave out a subject's id (path_redact)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        # `Not Found: /api/v1/memory/subjects/<subject>/memory.md`: the path without the subject's id.
        if isinstance(record.args, tuple):
            record.args = tuple(path_redact(a) if isinstance(a, str) else a for a in record.args)
        return True


class QuietSweepFilter(logging.Filter):
    """Celery's "received" and "succeeded" lines (and beat's "sending due task") of the periodic
    sweeps, which come every few seconds, are DEBUG unless the sweep did something (returned a
    count other than 0): at INFO the worker logs a sweep only when it changed something."""

    def __init__(self, tasks: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__()
        self.tasks = frozenset(tasks)

    def _quiet(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.levelno != logging.INFO:
            return False
        if isinstance(args, dict) and args.get("name") in self.tasks:  # the worker's lines
            return "return_value" not in args or str(args["return_value"]) in ("0", "None")
        # beat: "Scheduler: Sending due task %s (%s)" with (entry name, task name)
        return isinstance(args, tuple) and len(args) == 2 and args[1] in self.tasks

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._quiet(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)
