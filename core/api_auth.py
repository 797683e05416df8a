"""Who calls the REST API and for which tenant: per-tenant API keys, their scopes and rate limits.

A key looks like `kp_<prefix>_<secret>`; only the prefix and a SHA-256 of the secret are stored (the
secret has 256 random bits, so a plain digest is enough). With a key the tenant comes from the key:
any other tenant, and any object of another tenant, answers 404 as if it did not exist. A staff
session acts for the user's tenants (every tenant for a superuser) and needs a role, as in the
console; a view may name the roles its changes need (`session_roles`).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

import redis
from django.db import connection
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions, throttling

from core.errors import InvalidInput, NotFound
from core.logging import log_request_tenant
from core.models import ApiKey, ApiKeyScope, Tenant
from core.roles import member_tenant_ids, user_roles
from core.tenancy import run_tenant, tenant_bind_request, tenant_get, tenant_of_call, tenant_scope

if TYPE_CHECKING:  # rest_framework.views imports this module through the settings
    from rest_framework.request import Request
    from rest_framework.views import APIView

KEY_PATTERN = re.compile(r"kp_(?P<prefix>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})")

logger = logging.getLogger(__name__)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    plaintext: str  # shown once, never stored


@tenant_of_call
def api_key_create(*, tenant: Tenant, name: str, scope: str) -> CreatedKey:
    if scope not in ApiKeyScope.values:
        raise InvalidInput(f"scope must be one of {', '.join(ApiKeyScope.values)}", code="invalid_scope")
    if not name.strip():
        raise InvalidInput("a key needs a name", code="name_required")
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        tenant=tenant, name=name.strip(), prefix=prefix, secret_sha256=_digest(secret), scope=scope
    )
    return CreatedKey(key=key, plaintext=f"kp_{prefix}_{secret}")


def api_key_revoke(*, prefix: str) -> ApiKey:
    """Revoke a key named by its prefix (an operator's command: the tenant is learnt from the prefix
    through the narrow function, then the key is changed as that tenant)."""
    prefix = prefix.removeprefix("kp_").split("_")[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT keeper_api_key_tenant(%s)", [prefix])
        tenant_id = cursor.fetchone()[0]
    if tenant_id is None:
        raise NotFound(f"no API key kp_{prefix}", code="api_key_not_found")
    with tenant_scope(tenant_id):
        key = (
            ApiKey.objects.select_for_update(of=("self",))
            .select_related("tenant")
            .get(tenant_id=tenant_id, prefix=prefix)
        )
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
    return key


def api_key_authenticate(*, plaintext: str) -> ApiKey | None:
    """The active key this plaintext names, or None (unknown, revoked, malformed or a wrong secret).

    Asked before the request's tenant is known, so through keeper_api_key_resolve (the key's id and
    tenant when the prefix and the secret's digest match an active key; the digest never comes back),
    then read as that tenant."""
    match = KEY_PATTERN.fullmatch(plaintext)
    if match is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key_id, tenant_id FROM keeper_api_key_resolve(%s, %s)",
            [match["prefix"], _digest(match["secret"])],
        )
        found = cursor.fetchone()
    if found is None:
        return None
    key_id, tenant_id = found
    with tenant_scope(tenant_id):
        return (
            ApiKey.objects.select_related("tenant")
            .defer("secret_sha256")
            .filter(key_id=key_id, tenant_id=tenant_id, revoked_at__isnull=True)
            .first()
        )


@dataclass(frozen=True)
class ApiKeyUser:
    """The `request.user` of a key-authenticated request: never staff, named after the key."""

    key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_staff: bool = False
    is_superuser: bool = False

    def get_username(self) -> str:
        return f"kp_{self.key.prefix}"

    @property
    def pk(self) -> str:
        return f"api_key:{self.key.prefix}"

    id = pk  # for middleware and logs that read `request.user.id`


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer kp_...`; other requests fall through to the session."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ApiKeyUser, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("send `Authorization: Bearer kp_<prefix>_<secret>`")
        key = api_key_authenticate(plaintext=header[1])
        if key is None:
            raise exceptions.AuthenticationFailed("unknown or revoked API key")
        return ApiKeyUser(key=key), key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def request_key(request: Request) -> ApiKey | None:
    return request.auth if isinstance(request.auth, ApiKey) else None


class IsStaffOrScopedKey(permissions.BasePermission):
    """A read key only safe methods, a write key everything; a staff session its user's tenants, with
    a role, and for a change the role its view names (`session_roles`)."""

    message = "this API key may only read"

    def has_permission(self, request: Request, view: APIView) -> bool:
        key = request_key(request)
        if key is None:
            return self._session(request, view)
        log_request_tenant(key.tenant_id)  # every line this request logs names the key's tenant
        tenant_bind_request(request, key.tenant_id)  # row-level security: the key's tenant only
        if key.scope == ApiKeyScope.WRITE or request.method in permissions.SAFE_METHODS:
            return True
        # A search sent as POST (its query too long for a URL) changes nothing: a view says so.
        return request.method == "POST" and bool(getattr(view, "reads_by_post", False))

    def _session(self, request: Request, view: APIView) -> bool:
        """A staff session: as in the console, the user's roles and tenants (Django's staff flag alone
        must not let a user erase subjects of every tenant through the API)."""
        user = request.user
        # For the console's audit of a session's API changes (console.audit): this request is one,
        # whatever else its Authorization header says (a Basic one is not a key).
        if user and user.is_authenticated:  # (an anonymous caller's refusals are not entries)
            setattr(getattr(request, "_request", request), SESSION_MARK, True)
        if not (user and user.is_staff):
            self.message = (
                "the API takes an API key (Authorization: Bearer kp_...) or a staff session; "
                "this console user is not staff"
            )
            return False
        roles = user_roles(user)
        if not roles:
            self.message = "this staff user has no role (support, compliance or engineer)"
            return False
        needed = getattr(view, "session_roles", ())
        if request.method not in permissions.SAFE_METHODS and needed and not roles & set(needed):
            self.message = f"this needs the {' or '.join(needed)} role"
            return False
        # Row-level security: the user's tenants (a named one narrows it later).
        tenant_bind_request(request, session_tenant_ids(user))
        return True


SESSION_MARK = "keeper_api_session"  # on Django's request: the API served it on a staff session
SESSION_TENANT = "keeper_api_session_tenant"  # the tenant it acted in, once known


def _session_tenant_note(request: Request, tenant_id: UUID) -> None:
    if request_key(request) is None:
        setattr(getattr(request, "_request", request), SESSION_TENANT, tenant_id)


def session_tenant_ids(user: Any) -> list[UUID]:
    """The tenants a staff session acts for: every tenant for a superuser, else the user's memberships."""
    if user.is_superuser:
        return list(Tenant.objects.values_list("tenant_id", flat=True))
    return member_tenant_ids(user_id=user.pk)


# A sliding window of request times per key, as one Redis script: drop the times older than the
# window, count, and add this request only when under the limit. Atomic, so concurrent requests on
# any number of web processes cannot all read the same count. Returns 1 (served) or 0 and the
# seconds until enough counted requests leave the window (a string: Lua numbers become integers).
SLIDING_WINDOW = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
  return {1, '0'}
end
-- Served again once all but limit - 1 have left the window: more than `limit` are in it after the
-- limit was lowered, and then the oldest leaving is not enough.
local freeing = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return {0, tostring(tonumber(freeing[2]) + window - now)}
"""


def rate_cache_is_redis() -> bool:
    from django.core.cache import cache

    return callable(getattr(getattr(cache, "_cache", None), "get_client", None))


def rate_window_take(*, key: str, limit: int, window: float) -> tuple[bool, float]:
    """Count one request in this key's window if it is under `limit`: (served, seconds to wait)."""
    from django.core.cache import cache

    # The counters live in the cache's Redis (CACHES), shared by every web process.
    client = cache._cache.get_client(key, write=True)  # type: ignore[attr-defined]
    served, wait = client.register_script(SLIDING_WINDOW)(
        keys=[cache.make_and_validate_key(key)], args=[time.time(), window, limit, uuid4().hex]
    )
    return bool(served), max(0.0, float(wait))


class ApiKeyRateThrottle(throttling.SimpleRateThrottle):
    """One bucket per key (`KEEPER_API_RATE`); staff sessions are not throttled."""

    scope = "api_key"
    _wait: float | None = None
    # Set by SimpleRateThrottle.__init__ from the rate (parse_rate); the DRF stubs leave them out.
    num_requests: int
    duration: int

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        key = request_key(request)
        if key is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": key.prefix}

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self.rate is None:
            return True
        if not rate_cache_is_redis():  # another cache backend: Django's own (not atomic) counting
            return super().allow_request(request, view)
        cache_key = self.get_cache_key(request, view)
        if cache_key is None:
            return True
        # Without Redis the API still answers (runs live in PostgreSQL): the limit is skipped,
        # loudly, rather than every request failing.
        try:
            served, self._wait = rate_window_take(
                key=cache_key, limit=self.num_requests, window=self.duration
            )
        except (redis.RedisError, OSError) as exc:
            logger.warning("rate limit not checked (cache unavailable: %s)", exc)
            return True
        return served

    def wait(self) -> float | None:
        return self._wait if rate_cache_is_redis() else super().wait()


class WorkerProtocolThrottle(ApiKeyRateThrottle):
    """The worker protocol's calls (claims, heartbeats, commits, releases, operations) in a bucket of
    their own per key (`KEEPER_WORKER_RATE`): a fleet of workers on one key must not lose a lease to
    the API's limit, and the API's clients are not starved by the workers' heartbeats."""

    scope = "worker_protocol"


def request_actor(request: Request) -> str:
    key = request_key(request)
    if key is not None:
        return f"api_key:{key.prefix}"
    return f"user:{request.user.get_username()}"


def request_tenant(request: Request, given: str | UUID | None = None) -> Tenant:
    """The tenant of this request: the key's (another `given` answers 404), or `given` for staff."""
    key = request_key(request)
    if key is None:
        if given in (None, ""):  # a staff session acts for several tenants: it names one
            raise exceptions.ValidationError({"tenant": ["This field is required."]})
        tenant = tenant_get(slug_or_id=given)
        if tenant.tenant_id not in session_tenant_ids(request.user):
            raise NotFound(f"no tenant {given!s}", code="unknown_tenant")
    elif given in (None, "") or str(given) in (key.tenant.slug, str(key.tenant_id)):
        tenant = key.tenant
    else:
        raise NotFound(f"no tenant {given!s}", code="unknown_tenant")
    log_request_tenant(tenant.tenant_id)
    tenant_bind_request(request, tenant.tenant_id)  # row-level security: this tenant from here on
    _session_tenant_note(request, tenant.tenant_id)
    return tenant


def request_may_see(request: Request, tenant_id: UUID) -> bool:
    """Whether an object of this tenant exists for this request (a staff session: its tenants')."""
    key = request_key(request)
    if key is not None:
        return key.tenant_id == tenant_id
    seen = tenant_id in session_tenant_ids(request.user)
    if seen:
        _session_tenant_note(request, tenant_id)
    return seen


def request_run_tenant(request: Request, run_id: UUID) -> UUID:
    """The tenant of a run this request may see, bound for the rest of the request; a run of
    another tenant does not exist for an API key (404 run_not_found)."""
    tenant_id = run_tenant(run_id)  # the narrow path: the run's tenant and nothing else
    if tenant_id is None or not request_may_see(request, tenant_id):
        raise NotFound(f"no run {run_id}", code="run_not_found")
    tenant_bind_request(request, tenant_id)
    return tenant_id
