"""Every variable in the settings reference's table (docs/reference/settings.md) reaches what uses
it, and the code reads no KEEPER_* variable the table leaves out (KEEPER_EMBEDDER and
KEEPER_EXTRACTOR were once documented but never read, so production always used the defaults).

Settings are process-wide, so the variables are set in a fresh interpreter with production settings
(importing settings connects to nothing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from core.processes import ROOT

# Production's minimum, with non-default values the checks below look for.
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "SECRET_KEY": "s" * 20 + "-documented-settings-0123456789",
    "KEEPER_DIGEST_KEY": "d" * 20 + "-documented-settings-0123456789",
}

# variable -> (a valid non-default value, an expression over `settings` / `launch` / `factories`,
# the value that expression must then have).
CASES: dict[str, tuple[str, str, object]] = {
    "DATABASE_URL": (
        "postgresql://app@db.example:5433/kdb",
        "[settings.DATABASES['default'][k] for k in ('USER', 'HOST', 'PORT', 'NAME')]",
        ["app", "db.example", "5433", "kdb"],
    ),
    "DATABASE_OWNER_URL": (
        "postgresql://own@db.example:5433/kdb",
        "settings.DATABASES['owner']['USER']",
        "own",
    ),
    "REDIS_URL": (
        "redis://cache.example:6380/2",
        "[settings.REDIS_URL, settings.CELERY_BROKER_URL, settings.CACHES['default']['LOCATION']]",
        ["redis://cache.example:6380/2"] * 3,
    ),
    "SECRET_KEY": (PRODUCTION["SECRET_KEY"], "settings.SECRET_KEY", PRODUCTION["SECRET_KEY"]),
    "KEEPER_DIGEST_KEY": (
        PRODUCTION["KEEPER_DIGEST_KEY"],
        "settings.KEEPER_DIGEST_KEY",
        PRODUCTION["KEEPER_DIGEST_KEY"],
    ),
    "ALLOWED_HOSTS": ("a.example,b.example", "settings.ALLOWED_HOSTS[:2]", ["a.example", "b.example"]),
    "DJANGO_SETTINGS_MODULE": (
        "config.settings.production",
        "settings.SETTINGS_MODULE",
        "config.settings.production",
    ),
    "KEEPER_DATA_DIR": (
        "/tmp/keeper-doc-data",
        "[str(settings.DATA_DIR), str(launch.data_dir)]",
        ["/tmp/keeper-doc-data"] * 2,
    ),
    "KEEPER_EMBEDDED_SHARED_BUFFERS": ("512MB", "settings.KEEPER_EMBEDDED_SHARED_BUFFERS", "512MB"),
    "KEEPER_HOST": ("0.0.0.0", "launch.host", "0.0.0.0"),
    "KEEPER_PORT": ("8123", "launch.port", "8123"),
    "KEEPER_DEMO": ("false", "launch.demo", False),
    "KEEPER_ADMIN_PASSWORD": ("pw-from-env", "settings.KEEPER_ADMIN_PASSWORD", "pw-from-env"),
    "KEEPER_LEASE_TTL": ("45", "settings.KEEPER_LEASE_TTL", 45.0),
    "KEEPER_OPERATION_CALL_TIMEOUT": ("12", "settings.KEEPER_OPERATION_CALL_TIMEOUT", 12.0),
    "KEEPER_MAX_ATTEMPTS": ("7", "settings.KEEPER_MAX_ATTEMPTS", 7),
    "KEEPER_RETRY_BACKOFF": ("2.5", "settings.KEEPER_RETRY_BACKOFF", 2.5),
    "KEEPER_SLICE_STEPS": ("7", "settings.KEEPER_SLICE_STEPS", 7),
    "KEEPER_SLICE_MS": ("50", "settings.KEEPER_SLICE_MS", 50.0),
    "KEEPER_CLAIM_WAITERS": ("5", "settings.KEEPER_CLAIM_WAITERS", 5),
    "KEEPER_REDISPATCH_INTERVAL": ("7", "settings.KEEPER_REDISPATCH_INTERVAL", 7.0),
    "KEEPER_WEBHOOKS_ALLOW_HTTP": ("true", "settings.KEEPER_WEBHOOKS_ALLOW_HTTP", True),
    "KEEPER_WEBHOOKS_ALLOW_PRIVATE": ("true", "settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE", True),
    "KEEPER_WEBHOOKS_INTERVAL": ("3", "settings.KEEPER_WEBHOOKS_INTERVAL", 3.0),
    "KEEPER_WEBHOOKS_TIMEOUT": ("4", "settings.KEEPER_WEBHOOKS_TIMEOUT", 4.0),
    "KEEPER_WEBHOOKS_BACKOFF": ("20", "settings.KEEPER_WEBHOOKS_BACKOFF", 20.0),
    "KEEPER_WEBHOOKS_MAX_ATTEMPTS": ("7", "settings.KEEPER_WEBHOOKS_MAX_ATTEMPTS", 7),
    "KEEPER_REDISPATCH_GRACE": ("20", "settings.KEEPER_REDISPATCH_GRACE", 20.0),
    "KEEPER_TOOL_RESULT_PREVIEW_CHARS": ("3000", "settings.KEEPER_TOOL_RESULT_PREVIEW_CHARS", 3000),
    "KEEPER_SESSION_WINDOW": ("60", "settings.KEEPER_SESSION_WINDOW", 60),
    "KEEPER_SESSION_TTL": ("3600", "settings.KEEPER_SESSION_TTL", 3600),
    "KEEPER_COMPACTOR": ("model", "factories['compactor'][0]", "ModelCompactor"),
    "KEEPER_COMPACTOR_URL": ("http://llm.example/v1", "factories['compactor'][1]", "http://llm.example/v1"),
    "KEEPER_COMPACTOR_MODEL": ("compact-model", "factories['compactor'][2]", "compact-model"),
    "KEEPER_COMPACTOR_API_KEY": ("k-compact", "factories['compactor'][3]", "k-compact"),
    "KEEPER_SUMMARY_CHUNK_EVENTS": ("150", "settings.KEEPER_SUMMARY_CHUNK_EVENTS", 150),
    "KEEPER_INFERENCE_TTL_DAYS": ("14", "settings.KEEPER_INFERENCE_TTL_DAYS", 14),
    "KEEPER_EMBEDDER": ("http", "factories['embedder'][0]", "HttpEmbedder"),
    "KEEPER_EMBEDDER_URL": ("http://embed.example/v1", "factories['embedder'][1]", "http://embed.example/v1"),
    "KEEPER_EMBEDDER_MODEL": ("embed-model", "factories['embedder'][2]", "embed-model"),
    "KEEPER_EMBEDDER_API_KEY": ("k-embed", "factories['embedder'][3]", "k-embed"),
    "KEEPER_EMBEDDER_DIMENSIONS": ("384", "factories['embedder'][4]", 384),
    "KEEPER_EMBEDDER_SEND_DIMENSIONS": ("false", "factories['embedder'][5]", False),
    "KEEPER_RETRIEVAL_MAX_BYTES": ("2048", "settings.KEEPER_RETRIEVAL_MAX_BYTES", 2048),
    "KEEPER_RETRIEVAL_MAX_CHUNKS": ("100", "settings.KEEPER_RETRIEVAL_MAX_CHUNKS", 100),
    "KEEPER_RETRIEVAL_CHUNK_WORDS": ("64", "settings.KEEPER_RETRIEVAL_CHUNK_WORDS", 64),
    "KEEPER_RETRIEVAL_TTL_DAYS": ("0", "settings.KEEPER_RETRIEVAL_TTL_DAYS", 0),
    "KEEPER_SEARCH_PARALLEL_ARMS": ("false", "settings.KEEPER_SEARCH_PARALLEL_ARMS", False),
    "KEEPER_RETRIEVAL_SWEEP_INTERVAL": ("30", "settings.KEEPER_RETRIEVAL_SWEEP_INTERVAL", 30.0),
    "KEEPER_API_RATE": ("100/min", "settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['api_key']", "100/min"),
    "KEEPER_WORKER_RATE": (
        "50/s",
        "settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['worker_protocol']",
        "50/s",
    ),
    "KEEPER_LOGIN_MAX_FAILURES": ("3", "settings.KEEPER_LOGIN_MAX_FAILURES", 3),
    "KEEPER_LOGIN_WINDOW": ("600", "settings.KEEPER_LOGIN_WINDOW", 600),
    "KEEPER_EXTRACTOR": ("model", "factories['extractor'][0]", "ModelExtractor"),
    "KEEPER_EXTRACTOR_URL": (
        "http://extract.example/v1",
        "factories['extractor'][1]",
        "http://extract.example/v1",
    ),
    "KEEPER_EXTRACTOR_MODEL": ("extract-model", "factories['extractor'][2]", "extract-model"),
    "KEEPER_EXTRACTOR_API_KEY": ("k-extract", "factories['extractor'][3]", "k-extract"),
    "KEEPER_FORK_TTL": ("3600", "settings.KEEPER_FORK_TTL", 3600.0),
    "KEEPER_PARTITIONS_AHEAD": ("4", "settings.KEEPER_PARTITIONS_AHEAD", 4),
    "KEEPER_EVENTS_RETENTION_DAYS": ("400", "settings.KEEPER_EVENTS_RETENTION_DAYS", 400.0),
    "KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS": (
        "90",
        "settings.KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS",
        90.0,
    ),
    "KEEPER_AUDIT_RETENTION_DAYS": ("2555", "settings.KEEPER_AUDIT_RETENTION_DAYS", 2555.0),
    "KEEPER_FORK_STARTED_TTL": ("7200", "settings.KEEPER_FORK_STARTED_TTL", 7200.0),
    "KEEPER_REPLAY_MODEL_URLS": (
        "https://llm.internal/v1, http://127.0.0.1:8080/v1",
        "settings.KEEPER_REPLAY_MODEL_URLS",
        ["https://llm.internal/v1", "http://127.0.0.1:8080/v1"],
    ),
    "KEEPER_WORKSPACE_SNAPSHOT_STEPS": ("5", "settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS", 5),
    "KEEPER_WORKSPACE_TTL": ("3600", "settings.KEEPER_WORKSPACE_TTL", 3600.0),
    "KEEPER_SCHEDULE_INTERVAL": ("2", "settings.KEEPER_SCHEDULE_INTERVAL", 2.0),
    "KEEPER_SCHEDULES_PER_TENANT": ("7", "settings.KEEPER_SCHEDULES_PER_TENANT", 7),
    "KEEPER_SCHEDULE_MIN_INTERVAL": ("300", "settings.KEEPER_SCHEDULE_MIN_INTERVAL", 300),
    "KEEPER_WEBHOOKS_PER_TENANT": ("4", "settings.KEEPER_WEBHOOKS_PER_TENANT", 4),
    "KEEPER_CONSENT_POLICY": ('{"*": {}}', "settings.KEEPER_CONSENT_POLICY", '{"*": {}}'),
    "KEEPER_CONSENT_PENDING_TTL_HOURS": ("5", "settings.KEEPER_CONSENT_PENDING_TTL_HOURS", 5),
    "KEEPER_MODEL_PRICES": (
        '{"local-llm": {"input_per_1k": 0.5, "output_per_1k": 1}}',
        "settings.KEEPER_MODEL_PRICES",
        {"local-llm": {"input_per_1k": 0.5, "output_per_1k": 1.0}},
    ),
    "KEEPER_MAX_STATE_BYTES": ("4096", "settings.KEEPER_MAX_STATE_BYTES", 4096),
    "KEEPER_ARTIFACT_ROOT": (
        "/tmp/keeper-doc-artifacts",
        "str(settings.KEEPER_ARTIFACT_ROOT)",
        "/tmp/keeper-doc-artifacts",
    ),
    # The S3 store chosen, with the bucket, endpoint, region and time limit it is built with.
    "KEEPER_ARTIFACT_STORE": ("s3", "type(artifact_store()).__name__", "S3ArtifactStore"),
    "KEEPER_ARTIFACT_S3_BUCKET": ("keeper-doc-bucket", "artifact_store().bucket", "keeper-doc-bucket"),
    "KEEPER_ARTIFACT_S3_ENDPOINT_URL": (
        "http://s3.example:9000",
        "artifact_store().client.meta.endpoint_url",
        "http://s3.example:9000",
    ),
    "KEEPER_ARTIFACT_S3_REGION": ("eu-west-3", "artifact_store().client.meta.region_name", "eu-west-3"),
    "KEEPER_ARTIFACT_TIMEOUT": (
        "7",
        "[settings.KEEPER_ARTIFACT_TIMEOUT, artifact_store().client.meta.config.read_timeout]",
        [7.0, 7.0],
    ),
    "KEEPER_ARTIFACT_GRACE": ("3600", "settings.KEEPER_ARTIFACT_GRACE", 3600.0),
    "KEEPER_PREPARED_STATEMENTS": ("false", "settings.KEEPER_PREPARED_STATEMENTS", False),
    # Its effect (no prepared statements unless told) is test_a_transaction_pooler_turns_off_...'s.
    "KEEPER_DB_POOLER": ("transaction", "settings.KEEPER_DB_POOLER", "transaction"),
    "KEEPER_CRASH_AT": ("after_checkpoint:2", "settings.KEEPER_CRASH_AT", "after_checkpoint:2"),
    "KEEPER_CRASH_ONCE_DIR": (
        "/tmp/keeper-doc-crash",
        "settings.KEEPER_CRASH_ONCE_DIR",
        "/tmp/keeper-doc-crash",
    ),
    "KEEPER_CRASH_STEP": ("refund", "settings.KEEPER_CRASH_STEP", "refund"),
    "KEEPER_SANDBOX_URL": (
        "http://pay.example/sandbox",
        "settings.KEEPER_SANDBOX_URL",
        "http://pay.example/sandbox",
    ),
    "KEEPER_SANDBOX_ENABLED": ("true", "settings.KEEPER_SANDBOX_ENABLED", True),  # production's default: off
    "KEEPER_PAYMENTS_TIMEOUT": ("9", "settings.KEEPER_PAYMENTS_TIMEOUT", 9.0),
    "KEEPER_APPROVAL_TTL": ("600", "settings.KEEPER_APPROVAL_TTL", 600.0),
    "KEEPER_REFUND_AUTO_APPROVE_MINOR": ("1000", "settings.KEEPER_REFUND_AUTO_APPROVE_MINOR", 1000),
    "KEEPER_REFUND_WINDOW_DAYS": ("14", "settings.KEEPER_REFUND_WINDOW_DAYS", 14),
    "KEEPER_DECIDER": ("model", "factories['decider'][0]", "ModelDecider"),
    "KEEPER_DECIDER_URL": ("http://decide.example/v1", "factories['decider'][1]", "http://decide.example/v1"),
    "KEEPER_DECIDER_MODEL": ("decide-model", "factories['decider'][2]", "decide-model"),
    "KEEPER_DECIDER_API_KEY": ("k-decide", "factories['decider'][3]", "k-decide"),
    "KEEPER_WORKFLOW_MODULES": ("tests.workflows", "settings.KEEPER_WORKFLOW_MODULES", ["tests.workflows"]),
    "KEEPER_WORKER_CONCURRENCY": ("3", "settings.CELERY_WORKER_CONCURRENCY", 3),
    "KEEPER_WORKER_POOL": ("prefork", "settings.CELERY_WORKER_POOL", "prefork"),
    "WEB_CONCURRENCY": ("3", "gunicorn['workers']", 3),
    "KEEPER_TASK_TIME_LIMIT": ("120", "settings.CELERY_TASK_TIME_LIMIT", 120),
    "KEEPER_SESSION_AGE": ("3600", "settings.SESSION_COOKIE_AGE", 3600),
    "KEEPER_MODEL": ("gpt-doc", "settings.KEEPER_MODEL", "gpt-doc"),
    "KEEPER_LOG_LEVEL": (
        "DEBUG",
        "[settings.LOGGING['root']['level'], gunicorn['logconfig_dict']['loggers']['gunicorn.access']['level']]",
        ["DEBUG", "DEBUG"],
    ),
    "KEEPER_LOG_FORMAT": (
        "plain",
        "[settings.LOGGING['handlers']['console']['formatter'], "
        "gunicorn['logconfig_dict']['handlers']['stderr']['formatter']]",
        ["plain", "plain"],
    ),
    "KEEPER_METRICS_TOKEN": ("tok-123", "settings.KEEPER_METRICS_TOKEN", "tok-123"),
    "KEEPER_WORKER_METRICS_PORT": ("9101", "settings.KEEPER_WORKER_METRICS_PORT", "9101"),
    "KEEPER_WORKER_METRICS_ADDR": ("127.0.0.1", "settings.KEEPER_WORKER_METRICS_ADDR", "127.0.0.1"),
    "KEEPER_READY_TIMEOUT": ("5", "settings.KEEPER_READY_TIMEOUT", 5.0),
    "KEEPER_BENCH_SUPERUSER_URL": (
        "postgresql://su@db.example/kdb",
        "settings.KEEPER_BENCH_SUPERUSER_URL",
        "postgresql://su@db.example/kdb",
    ),
    "SECURE_SSL_REDIRECT": ("true", "settings.SECURE_SSL_REDIRECT", True),
    "SECURE_HSTS_SECONDS": ("60", "settings.SECURE_HSTS_SECONDS", 60),
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": ("false", "settings.SECURE_HSTS_INCLUDE_SUBDOMAINS", False),
    "SECURE_HSTS_PRELOAD": ("true", "settings.SECURE_HSTS_PRELOAD", True),
    "CSRF_TRUSTED_ORIGINS": ("https://k.example", "settings.CSRF_TRUSTED_ORIGINS", ["https://k.example"]),
}
# Production refuses DEBUG on, so DEBUG is checked with local settings (and services set, so
# nothing embedded starts).
DEBUG_CASE = ("false", "settings.DEBUG", False)
# Read by docker-compose.yml and deploy/postgres-init.sh, not by Keeper's Python.
COMPOSE_ONLY = ("KEEPER_OWNER_PASSWORD", "KEEPER_APP_PASSWORD", "POSTGRES_PASSWORD")

PROBE = """
import json, runpy, sys, django
from django.conf import settings
django.setup()
from config.launcher import launch_options
from core.artifacts import artifact_store
from memory.embedders import embedder_from_settings
from memory.extraction import extractor_from_settings
from runs.conversations.compaction.compactors import compactor_from_settings
from runs.workflows.refund.deciders import decider_from_settings

def described(thing, *extra):
    fields = ("base_url", "model", "api_key", *extra)
    return [type(thing).__name__, *(getattr(thing, name, None) for name in fields)]

class Factories(dict):
    # Builds a part only when an expression asks for it (a local model is not there to load).

    def __missing__(self, name):
        built = {
            "embedder": lambda: described(embedder_from_settings(), "dimensions", "send_dimensions"),
            "extractor": lambda: described(extractor_from_settings()),
            "compactor": lambda: described(compactor_from_settings()),
            "decider": lambda: described(decider_from_settings()),
        }[name]()
        self[name] = built
        return built


factories = Factories()
launch = launch_options()
gunicorn = runpy.run_path("config/gunicorn.py")  # what `make run` and the image start the web with
checks = json.loads(sys.argv[1])
print(json.dumps({name: eval(expr) for name, expr in checks.items()}, default=str))
"""


# Variables that only take effect beside another choice than CASES makes, each probed on its own:
# variable -> (the other variables, a valid value, the expression, its expected value).
ALONE: dict[str, tuple[dict[str, str], str, str, object]] = {
    "KEEPER_EMBEDDER_MODEL_PATH": (
        {"KEEPER_EMBEDDER": "sentence-transformers"},
        "/models/mini",
        "settings.BACKENDS['embedder']",
        {
            "BACKEND": "memory.embedders.local.SentenceTransformerEmbedder",
            "OPTIONS": {"model_path": "/models/mini"},
        },
    ),
    # The earlier name, read when KEEPER_PARTITIONS_AHEAD is unset or empty (set, the new one wins).
    "KEEPER_EVENTS_PARTITIONS_AHEAD": (
        {"KEEPER_PARTITIONS_AHEAD": ""},
        "5",
        "settings.KEEPER_PARTITIONS_AHEAD",
        5,
    ),
}


SETTINGS_PAGE = ROOT / "docs" / "reference" / "settings.md"


def documented_variables() -> list[str]:
    """The names in the first column of the settings reference's table of variables."""
    lines = SETTINGS_PAGE.read_text().splitlines()
    start = lines.index("| variable | default | meaning |")
    names: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names += re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])
    return names


def _probe(env: dict[str, str], checks: dict[str, str]) -> dict[str, object]:
    done = _probe_run(env, checks)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _probe_run(env: dict[str, str], checks: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "SECURE_", "DJANGO_"))}
    for name in (
        "DEBUG",
        "ALLOWED_HOSTS",
        "SECRET_KEY",
        "DATABASE_URL",
        "DATABASE_OWNER_URL",
        "REDIS_URL",
        "CSRF_TRUSTED_ORIGINS",
    ):
        clean.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(checks)],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_table_and_the_checks_name_the_same_variables():
    documented = documented_variables()
    assert len(documented) == len(set(documented)), "a variable is documented twice"
    assert set(documented) == {*CASES, *ALONE, "DEBUG", *COMPOSE_ONLY}


def test_every_documented_variable_reaches_the_setting_that_uses_it():
    env = {**PRODUCTION, **{name: value for name, (value, _, _) in CASES.items()}}
    got = _probe(env, {name: expr for name, (_, expr, _) in CASES.items()})
    wrong = {name: (got[name], expected) for name, (_, _, expected) in CASES.items() if got[name] != expected}
    assert not wrong, f"variable: (got, expected): {wrong}"


@pytest.mark.parametrize("name", sorted(ALONE))
def test_variables_of_another_choice_reach_their_setting(name):
    others, value, expr, expected = ALONE[name]
    env = {**PRODUCTION, **{n: v for n, (v, _, _) in CASES.items()}, **others, name: value}
    assert _probe(env, {name: expr}) == {name: expected}


def test_debug_reaches_the_settings():
    value, expr, expected = DEBUG_CASE
    env = {
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DEBUG": value,
        "DATABASE_URL": "postgresql://app@db.example/kdb",
        "REDIS_URL": "redis://cache.example:6379/0",
    }
    assert _probe(env, {"DEBUG": expr}) == {"DEBUG": expected}


def test_the_defaults_build_the_offline_embedder_and_the_rule_extractor(settings):
    from memory.embedders import HashingEmbedder, HttpEmbedder, embedder_from_settings
    from memory.extraction import ModelExtractor, RuleExtractor, extractor_from_settings

    assert isinstance(embedder_from_settings(), HashingEmbedder)
    assert isinstance(extractor_from_settings(), RuleExtractor)
    embedder = {
        "BACKEND": "memory.embedders.http.HttpEmbedder",
        "OPTIONS": {"base_url": "http://e/v1", "model": "m", "dimensions": 8},
    }
    settings.BACKENDS = {**settings.BACKENDS, "embedder": embedder}
    assert isinstance(embedder_from_settings(), HttpEmbedder)
    options = {"base_url": "http://extract.example/v1", "model": "m", "api_key": ""}
    backend = {"BACKEND": "memory.extraction.ModelExtractor", "OPTIONS": options}
    settings.BACKENDS = {**settings.BACKENDS, "extractor": backend}
    assert isinstance(extractor_from_settings(), ModelExtractor)


def test_compose_only_variables_are_used_by_compose():
    compose = (ROOT / "docker-compose.yml").read_text()
    for name in COMPOSE_ONLY:
        assert "${" + name in compose, name
    assert re.search(r"DATABASE_URL: postgresql://keeper:\$\{KEEPER_APP_PASSWORD", compose)
    assert re.search(r"DATABASE_OWNER_URL: postgresql://keeper_owner:\$\{KEEPER_OWNER_PASSWORD", compose)


def _code_reads() -> dict[str, set[str]]:
    """Every KEEPER_* name Keeper's code (not its tests) mentions as a string or a setting."""
    found: dict[str, set[str]] = {}
    skip = {".venv", "tests", "node_modules", ".data", "staticfiles"}
    for path in ROOT.rglob("*.py"):
        if skip & set(path.relative_to(ROOT).parts):
            continue
        text = path.read_text()
        for pattern in (
            r"settings\.(KEEPER_[A-Z0-9_]+)",
            r"""["'](KEEPER_[A-Z0-9_]+)["']""",
            r"environ(?:\.get)?[\[(]\s*[\"'](KEEPER_[A-Z0-9_]+)",
        ):
            for name in re.findall(pattern, text):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    for path in (ROOT / "docker-compose.yml", ROOT / "Dockerfile", ROOT / "Makefile"):
        for name in re.findall(r"\b(KEEPER_[A-Z0-9_]+)\b", path.read_text()):
            found.setdefault(name, set()).add(path.name)
    return found


def test_every_keeper_variable_the_code_reads_is_documented():
    reads = _code_reads()
    assert {"KEEPER_EMBEDDER", "KEEPER_EXTRACTOR_URL", "KEEPER_LEASE_TTL"} <= set(reads)  # the scan works
    undocumented = {
        name: sorted(where) for name, where in reads.items() if name not in documented_variables()
    }
    assert not undocumented, (
        f"read but not in the settings reference (docs/reference/settings.md): {undocumented}"
    )


def test_the_settings_read_every_documented_keeper_variable():
    """One place: each documented KEEPER_* (but the launcher's and compose's) is read in settings."""
    settings_text = "".join(p.read_text() for p in (ROOT / "config" / "settings").glob("*.py"))
    launcher_only = {"KEEPER_HOST", "KEEPER_PORT", "KEEPER_DEMO"}
    missing = [
        name
        for name in documented_variables()
        if name.startswith("KEEPER_")
        and name not in launcher_only
        and name not in COMPOSE_ONLY
        and f'"{name}"' not in settings_text
    ]
    assert not missing, missing


def test_the_worker_pool_sets_the_default_concurrency_and_refuses_an_unknown_pool():
    base = {**PRODUCTION, **{n: v for n, (v, _, _) in CASES.items() if not n.startswith("KEEPER_WORKER_")}}
    expr = {"pool": "settings.CELERY_WORKER_POOL", "concurrency": "settings.CELERY_WORKER_CONCURRENCY"}
    assert _probe(base, expr) == {"pool": "threads", "concurrency": 16}
    assert _probe({**base, "KEEPER_WORKER_POOL": "prefork"}, expr) == {"pool": "prefork", "concurrency": 2}
    refused = _probe_run({**base, "KEEPER_WORKER_POOL": "gevent"}, expr)
    assert refused.returncode != 0
    assert "unknown KEEPER_WORKER_POOL 'gevent' (use threads or prefork)" in refused.stderr


def test_a_transaction_pooler_turns_off_prepared_statements_unless_told_otherwise():
    base = {**PRODUCTION, **{n: v for n, (v, _, _) in CASES.items() if n != "KEEPER_PREPARED_STATEMENTS"}}
    expr = {
        "held_cursors_off": "settings.DATABASES['default'].get('DISABLE_SERVER_SIDE_CURSORS', False)",
        "prepared": "settings.KEEPER_PREPARED_STATEMENTS",
    }
    # Cursors WITH HOLD are off with or without a pooler: every statement carries its tenant's
    # set_config in front of it, which DECLARE ... CURSOR cannot take (config.env).
    assert _probe({**base, "KEEPER_DB_POOLER": "none"}, expr) == {"held_cursors_off": True, "prepared": True}
    assert _probe(base, expr) == {"held_cursors_off": True, "prepared": False}  # CASES: transaction
    # PgBouncer 1.21+ with max_prepared_statements keeps prepared statements: the variable says so.
    assert _probe({**base, "KEEPER_PREPARED_STATEMENTS": "true"}, expr)["prepared"] is True
    refused = _probe_run({**base, "KEEPER_DB_POOLER": "pgbouncer"}, expr)
    assert refused.returncode != 0
    assert "unknown KEEPER_DB_POOLER 'pgbouncer' (use none, session or transaction)" in refused.stderr


def test_a_bad_setting_stops_manage_py_with_its_message_and_no_traceback():
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KEEPER_")},
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": "postgresql://app@db.invalid/kdb",
        "REDIS_URL": "redis://cache.invalid:6379/0",
        "KEEPER_WORKER_POOL": "gevent",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "keeper: configuration error: unknown KEEPER_WORKER_POOL 'gevent' (use threads or prefork)"
    )
