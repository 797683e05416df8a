"""A session's working window in Redis: the recent conversation of one run, for fast reads.

Postgres stays the record. The window is a projection keyed with the user dimension
(`session:{tenant}:{subject}:{run}`, the subject empty for a run without one), appended with RPUSH,
trimmed and given a TTL; a miss (expiry, a flushed Redis) rebuilds it from the events. A Redis failure
never fails the write it follows.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import redis
from django.conf import settings

from runs.kernel.models import AgentEvent, AgentRun

logger = logging.getLogger(__name__)
SESSION_EVENTS = ("user_message", "assistant_message", "tool_call", "tool_result")

_client: tuple[int, redis.Redis] | None = None


def redis_client() -> redis.Redis:
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2))
    return _client[1]


def session_key(run: AgentRun) -> str:
    return session_key_of(tenant_id=run.tenant_id, subject=run.subject, run_id=run.run_id)


def session_key_of(*, tenant_id: Any, subject: str, run_id: Any) -> str:
    """A run without a subject has an empty subject segment: no erasure can name it (a subject id is 1
    to 200 characters), whereas a placeholder such as "-" is a subject id, and erasing that subject
    would delete every such window. Keys written with "-" expire with their TTL."""
    return f"session:{tenant_id}:{subject}:{run_id}"


def _entry(event: AgentEvent) -> dict[str, Any]:
    p = event.payload
    text = p.get("content") if "content" in p else p.get("preview", "")
    return {
        "seq": event.seq,
        "type": event.event_type,
        "text": text,
        "call_id": p.get("call_id"),
        "tool": p.get("tool"),
    }


def session_rebuild(*, run: AgentRun) -> list[dict[str, Any]]:
    """Replace the window with the run's latest conversation events from Postgres."""
    events = AgentEvent.objects.filter(
        tenant_id=run.tenant_id, run=run, event_type__in=SESSION_EVENTS
    ).order_by("-seq")[: settings.KEEPER_SESSION_WINDOW]
    entries = [_entry(e) for e in reversed(list(events))]
    if run.subject.startswith("erased:"):
        # Read from Postgres, never cached again: the key would name the erased subject's pseudonym,
        # a place a later scan for them finds.
        return entries
    key = session_key(run)
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.delete(key)
        if entries:
            pipe.rpush(key, *[json.dumps(e, sort_keys=True) for e in entries])
            pipe.expire(key, settings.KEEPER_SESSION_TTL)
        pipe.execute()
    except redis.RedisError as exc:
        logger.warning("session window %s not rebuilt: %s", key, exc)
    return entries


def session_append(*, run: AgentRun, event: AgentEvent) -> None:
    if event.event_type not in SESSION_EVENTS:
        return
    key = session_key(run)
    try:
        client = redis_client()
        if not client.exists(key):
            session_rebuild(run=run)  # includes this event
            return
        pipe = client.pipeline(transaction=True)
        pipe.rpush(key, json.dumps(_entry(event), sort_keys=True))
        pipe.ltrim(key, -settings.KEEPER_SESSION_WINDOW, -1)
        pipe.expire(key, settings.KEEPER_SESSION_TTL)
        pipe.execute()
    except redis.RedisError as exc:
        logger.warning("session window %s not appended (%s); it is rebuilt on the next read", key, exc)


def session_window(*, run: AgentRun) -> list[dict[str, Any]]:
    """The recent conversation, in seq order (from Redis, or rebuilt from Postgres on a miss)."""
    try:
        raw = redis_client().lrange(session_key(run), 0, -1)
    except redis.RedisError as exc:
        logger.warning("session window unavailable (%s); reading Postgres", exc)
        raw = []
    by_seq = {e["seq"]: e for e in (json.loads(r) for r in raw)}  # a racing rebuild may repeat an entry
    latest = (
        AgentEvent.objects.filter(tenant_id=run.tenant_id, run=run, event_type__in=SESSION_EVENTS)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if not by_seq or (latest is not None and max(by_seq) < latest):
        # Missed (expired, flushed) or behind (an answer committed by a worker): Postgres decides.
        return session_rebuild(run=run)
    return [by_seq[s] for s in sorted(by_seq)][-settings.KEEPER_SESSION_WINDOW :]
