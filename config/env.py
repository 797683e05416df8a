"""Reading configuration from the environment, with clear errors for bad values."""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    """The variable's text; unset or empty means the default (as for the other helpers), so
    docker-compose's `${NAME:-}` passes "not set" through."""
    raw = os.environ.get(name)
    return default if raw is None or raw == "" else raw


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


def env_number(name: str, default: float, *, minimum: float = 0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be >= {minimum}")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = env_number(name, default, minimum=minimum)
    if value != int(value):
        raise ImproperlyConfigured(f"{name} must be a whole number")
    return int(value)


def env_model_prices(name: str) -> dict[str, dict[str, float]]:
    """A JSON object of per-model prices in USD per 1,000 tokens, e.g.
    {"gpt-4o-mini": {"input_per_1k": 0.00015, "output_per_1k": 0.0006}}; unset means none."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} is not JSON: {raw[:200]!r}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of models")
    prices: dict[str, dict[str, float]] = {}
    for model, price in value.items():
        if not isinstance(price, dict) or set(price) - {"input_per_1k", "output_per_1k"}:
            raise ImproperlyConfigured(f"{name}: {model!r} needs only input_per_1k and output_per_1k")
        for key, number in price.items():
            if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
                raise ImproperlyConfigured(f"{name}: {model}.{key} must be a number >= 0")
        prices[str(model)] = {k: float(v) for k, v in price.items()}
    return prices


def database_from_url(url: str) -> dict[str, Any]:
    """Django DATABASES entry from a libpq URL or key=value string (psycopg parses both)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except Exception as exc:
        raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from None
    options = {k: v for k, v in params.items() if k not in {"dbname", "user", "password", "host", "port"}}
    return {
        # Django's PostgreSQL backend with the bound tenant carried inside every statement's own
        # transaction (core/db/backend), so no session state outlives a transaction: correct behind
        # a transaction pooler (PgBouncer) as straight on PostgreSQL.
        "ENGINE": "core.db.backend",
        "NAME": params.get("dbname", ""),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": str(params.get("port", "")),
        "OPTIONS": options,
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        # A pooler cannot keep a server-side cursor between transactions, and every statement here
        # travels with its tenant's set_config in front of it, which DECLARE ... CURSOR cannot take.
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }


def celery_broker_url(redis_url: str) -> str:
    """Celery (kombu) names a unix-socket Redis `redis+socket://`; redis-py names it `unix://`."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url[len("unix://") :]
    return redis_url


def redis_client_url(redis_url: str) -> str:
    if redis_url.startswith("redis+socket://"):
        return "unix://" + redis_url[len("redis+socket://") :]
    return redis_url


def backend_choice(
    variable: str, kind: str, classes: dict[str, str], *, url: str, model: str, api_key: str
) -> dict[str, Any]:
    """settings.BACKENDS' entry for a part chosen by `variable` (e.g. KEEPER_DECIDER=rules|model).

    The "model" kind talks to an OpenAI-compatible chat API and needs `variable`_URL; the others
    take no options.
    """
    if kind not in classes:
        raise ImproperlyConfigured(f"unknown {variable} {kind!r} (use {' or '.join(classes)})")
    if kind != "model":
        return {"BACKEND": classes[kind], "OPTIONS": {}}
    if not url:
        raise ImproperlyConfigured(f"{variable}=model needs {variable}_URL")
    return {"BACKEND": classes[kind], "OPTIONS": {"base_url": url, "model": model, "api_key": api_key}}


EMBEDDERS = {
    "hashing": "memory.embedders.hashing.HashingEmbedder",
    "sentence-transformers": "memory.embedders.local.SentenceTransformerEmbedder",
    "http": "memory.embedders.http.HttpEmbedder",
}


def embedder_choice(
    kind: str, *, url: str, model: str, api_key: str, model_path: str, dimensions: int, send_dimensions: bool
) -> dict[str, Any]:
    """settings.BACKENDS' entry for the embedder chosen by KEEPER_EMBEDDER, with the options the
    chosen class takes; an unknown kind or a missing required variable stops the process here."""
    if kind not in EMBEDDERS:
        raise ImproperlyConfigured(f"unknown KEEPER_EMBEDDER {kind!r} (use {' or '.join(EMBEDDERS)})")
    options: dict[str, Any]
    if kind == "hashing":
        options = {"dimensions": dimensions}
    elif kind == "sentence-transformers":
        options = {"model_path": _required("KEEPER_EMBEDDER_MODEL_PATH", model_path, kind)}
    else:
        options = {
            "base_url": _required("KEEPER_EMBEDDER_URL", url, kind),
            "model": _required("KEEPER_EMBEDDER_MODEL", model, kind),
            "dimensions": dimensions,
            "api_key": api_key,
            "send_dimensions": send_dimensions,
        }
    return {"BACKEND": EMBEDDERS[kind], "OPTIONS": options}


def _required(variable: str, value: str, kind: str) -> str:
    if not value:
        raise ImproperlyConfigured(f"KEEPER_EMBEDDER={kind} needs {variable}")
    return value


ARTIFACT_STORES = {
    "local": "core.artifacts.local.LocalArtifactStore",
    "s3": "core.artifacts.s3.S3ArtifactStore",
}


def artifact_store_choice(
    kind: str, *, root: str, bucket: str, endpoint_url: str, region: str, timeout: float
) -> dict[str, Any]:
    """settings.BACKENDS' entry for the artifact store chosen by KEEPER_ARTIFACT_STORE: a local folder
    (KEEPER_ARTIFACT_ROOT) or an S3-compatible bucket (KEEPER_ARTIFACT_S3_BUCKET is required)."""
    if kind not in ARTIFACT_STORES:
        raise ImproperlyConfigured(
            f"unknown KEEPER_ARTIFACT_STORE {kind!r} (use {' or '.join(ARTIFACT_STORES)})"
        )
    if kind == "local":
        return {"BACKEND": ARTIFACT_STORES[kind], "OPTIONS": {"root": root}}
    if not bucket:
        raise ImproperlyConfigured("KEEPER_ARTIFACT_STORE=s3 needs KEEPER_ARTIFACT_S3_BUCKET")
    options = {"bucket": bucket, "endpoint_url": endpoint_url, "region": region, "timeout": timeout}
    return {"BACKEND": ARTIFACT_STORES[kind], "OPTIONS": options}
