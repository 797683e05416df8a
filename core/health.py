"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: database, Redis, migrations).

Readiness never raises: every check is timed and caught, so a dependency that is down gives a 503
naming it and its reason, and the next probe after it returns gives 200 again (no restart needed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


def _timeout() -> float:
    """Seconds each readiness check may take (KEEPER_READY_TIMEOUT, default 2)."""
    return float(settings.KEEPER_READY_TIMEOUT)


def check_database() -> str:
    """`SELECT 1` on a fresh connection with a connect and statement timeout (not the request's
    connection, so a stale pooled one cannot hide an outage or hang the probe)."""
    import psycopg

    timeout = _timeout()
    params = connections["default"].get_connection_params()
    params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context", "prepare_threshold"}}
    params["connect_timeout"] = max(1, round(timeout))
    params["options"] = f"{params.get('options', '')} -c statement_timeout={int(timeout * 1000)}".strip()
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute("SELECT 1").fetchone()
    return "ok"


def check_redis() -> str:
    import redis

    timeout = _timeout()
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    finally:
        client.close()
    return "ok"


def check_migrations() -> str:
    """Every migration on disk is applied (a web process started ahead of `migrate` is not ready)."""
    from django.db.migrations.executor import MigrationExecutor

    # The request's own connection: Django closes it at the end of the request if it broke.
    executor = MigrationExecutor(connections["default"])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        raise NotReady(f"{len(plan)} unapplied migration(s): {names}")
    return "ok"


class NotReady(Exception):
    """A check that reached its dependency and found it not ready (the message is the reason)."""


def _run(check: Callable[[], str]) -> dict[str, object]:
    started = time.monotonic()
    try:
        detail = check()
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        result: dict[str, object] = {"ok": False, "reason": f"{type(exc).__name__}: {reason}"[:500]}
    else:
        result = {"ok": True, "detail": detail}
    result["ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    try:
        checks = {"database": _run(check_database), "redis": _run(check_redis)}
        if checks["database"]["ok"]:
            checks["migrations"] = _run(check_migrations)
        else:
            checks["migrations"] = {
                "ok": False,
                "reason": "skipped: the database is not reachable",
                "ms": 0.0,
            }
        failing = [name for name, result in checks.items() if not result["ok"]]
    except Exception as exc:  # never a 500 from a probe
        logger.exception("readiness probe failed unexpectedly")
        return JsonResponse(
            {"status": "unavailable", "failing": ["readyz"], "reason": type(exc).__name__}, status=503
        )
    if failing:
        logger.warning("not ready: %s", "; ".join(f"{n}: {checks[n]['reason']}" for n in failing))
        return JsonResponse({"status": "unavailable", "failing": failing, "checks": checks}, status=503)
    return JsonResponse({"status": "ok", "checks": checks})
