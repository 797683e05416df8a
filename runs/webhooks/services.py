"""Webhook subscriptions: create (the secret is returned once), list, delete."""

from __future__ import annotations

import ipaddress
import re
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from runs.webhooks.models import EVENT_TYPES, DeliveryStatus, WebhookDelivery, WebhookSubscription

MAX_URL_CHARS = 2000


@dataclass(frozen=True)
class Created:
    subscription: WebhookSubscription
    secret: str  # shown to the caller once; never returned again


def webhook_url_check(*, url: str) -> str:
    """The endpoint as given, or InvalidInput saying why it cannot receive webhooks."""
    url = (url or "").strip()
    if len(url) > MAX_URL_CHARS:
        raise InvalidInput(f"the URL is longer than {MAX_URL_CHARS} characters", code="webhook_url_invalid")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InvalidInput(f"{url!r} is not a URL: {exc}", code="webhook_url_invalid") from None
    if any(ord(c) <= 0x20 or 0x7F <= ord(c) <= 0x9F for c in url):
        raise InvalidInput(
            "the URL contains a space or a control character (percent-encode it)", code="webhook_url_invalid"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"{url!r} is not an http(s) URL with a host", code="webhook_url_invalid", details={"url": url}
        )
    if parts.username or parts.password:
        raise InvalidInput(
            "put no credentials in the URL; verify the signature instead", code="webhook_url_invalid"
        )
    if parts.scheme == "http" and not (settings.DEBUG or settings.KEEPER_WEBHOOKS_ALLOW_HTTP):
        raise InvalidInput(
            "webhook endpoints must use https (plain http only in development: DEBUG or "
            "KEEPER_WEBHOOKS_ALLOW_HTTP)",
            code="webhook_https_required",
        )
    try:
        parts.hostname.encode("idna")  # a label over 63 characters, an empty one: no name resolves it
    except UnicodeError as exc:
        raise InvalidInput(
            f"{parts.hostname!r} is not a host name: {exc}", code="webhook_url_invalid"
        ) from None
    normalized = _normalized(parts)
    host = urlsplit(normalized).hostname or ""
    # As it will be sent ("localhost." is localhost). The refusal names the rule, never the address a
    # name resolved to: that would tell a tenant what the deployment's internal names point at.
    if webhook_host_inward(host):
        raise InvalidInput(
            f"{host} is on the deployment's own network: an endpoint must resolve only to public "
            "addresses (not loopback, private, link-local or reserved ones); a local receiver only in "
            "development: DEBUG or KEEPER_WEBHOOKS_ALLOW_PRIVATE",
            code="webhook_url_private",
        )
    return normalized


def _normalized(parts: SplitResult) -> str:
    """One spelling per endpoint: host in lower case without a trailing dot, no default port, "/" for
    an empty path, no empty query, no fragment (never sent). So `HOOKS.example.com:443/k#` is the
    endpoint `hooks.example.com/k` already subscribed, not a second one that gets every event again."""
    host = _address_spelling((parts.hostname or "").rstrip("."))
    if ":" not in host:  # a name: its ASCII form (höks -> xn--hks-sna; a fullwidth dot is a dot)
        host = host.encode("idna").decode().rstrip(".")
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None and parts.port != {"http": 80, "https": 443}[parts.scheme]:
        netloc += f":{parts.port}"
    path, query = _unreserved(parts.path) or "/", _unreserved(parts.query)
    return urlunsplit((parts.scheme, netloc, path, query, ""))


_NUMERIC_HOST = re.compile(r"[0-9A-Fa-fXx.]+")


def _address_spelling(host: str) -> str:
    """An IP address in its one spelling: the IPv4 forms the resolver takes (127.1, 2130706433,
    0x7f.0.0.1) as a dotted quad, an IPv6 address compressed, an IPv4 one inside IPv6 (::ffff:a.b.c.d)
    as itself: five spellings of one endpoint are one subscription, not five."""
    if ":" in host:
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            return host
        return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)
    if _NUMERIC_HOST.fullmatch(host) and any(c.isdigit() for c in host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return host
    return host


_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _unreserved(text: str) -> str:
    """RFC 3986's normalization: an unreserved character percent-encoded is that character (%6b is
    k), and other escapes are written in upper case."""

    def one(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else f"%{match.group(1).upper()}"

    # A character outside ASCII is sent as its UTF-8 bytes percent-encoded: /é stored as given makes
    # every delivery raise UnicodeEncodeError, and /%C3%A9 would be a second subscription to the same
    # endpoint.
    return _NON_ASCII.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode()), _PERCENT.sub(one, text)
    )


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _inward(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """On the deployment's own networks, an IPv4 address carried inside an IPv6 one included
    (::ffff:127.0.0.1, ::127.0.0.1, 64:ff9b::a9fe:a9fe for NAT64, 2002:7f00:1:: for 6to4)."""
    if not ip.is_global:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        low = int(ip) & 0xFFFFFFFF
        carried = [ip.ipv4_mapped, ip.sixtofour]
        if int(ip) >> 32 == 0 or ip in ipaddress.ip_network("64:ff9b::/96"):
            carried.append(ipaddress.IPv4Address(low))
        return any(v4 is not None and not v4.is_global for v4 in carried)
    return False


def webhook_host_addresses(host: str) -> list[str]:
    """The addresses `host` resolves to (an IP literal: itself); [] when it does not resolve."""
    try:  # a literal stands for itself, resolvable here or not (fe80::1%lo names an interface)
        return [str(ipaddress.ip_address(host)).split("%")[0]]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(address[0]).split("%")[0] for *_, address in found))


def webhook_host_inward(host: str, addresses: list[str] | None = None) -> str:
    """The first of the host's addresses on the deployment's own networks (loopback, private,
    link-local, reserved), or "" when it has none, or when such endpoints are allowed (DEBUG or
    KEEPER_WEBHOOKS_ALLOW_PRIVATE): a tenant's key must not subscribe, say,
    http://169.254.169.254/latest/meta-data, the cloud's metadata service."""
    if settings.DEBUG or settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE:
        return ""
    for address in webhook_host_addresses(host) if addresses is None else addresses:
        if _inward(ipaddress.ip_address(address)):
            return address
    return ""


def webhook_event_types_check(*, event_types: list[str]) -> list[str]:
    if not event_types:
        raise InvalidInput(
            f"subscribe to at least one event type: {', '.join(EVENT_TYPES)}",
            code="webhook_event_type_invalid",
        )
    unknown = sorted(set(event_types) - set(EVENT_TYPES))
    if unknown:
        raise InvalidInput(
            f"unknown event type {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}",
            code="webhook_event_type_invalid",
            details={"unknown": unknown, "known": list(EVENT_TYPES)},
        )
    return sorted(set(event_types))


class WebhookUrlSubscribed(Conflict):
    code = "webhook_url_subscribed"


class WebhookQuotaExceeded(InvalidInput):
    code = "webhook_quota_exceeded"


def _quota_check(tenant: Tenant) -> None:
    """WebhookQuotaExceeded if the tenant has KEEPER_WEBHOOKS_PER_TENANT live subscriptions. The
    tenant's subscriptions wait for one another here, so two at once cannot both take the last place."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"webhooks:{tenant.tenant_id}"]
        )
    quota = settings.KEEPER_WEBHOOKS_PER_TENANT
    live = WebhookSubscription.objects.filter(tenant_id=tenant.tenant_id, deleted_at__isnull=True)
    if live.count() >= quota:
        raise WebhookQuotaExceeded(
            f"tenant {tenant.slug} has {quota} webhook subscriptions, its most "
            "(KEEPER_WEBHOOKS_PER_TENANT); delete one first",
            details={"quota": quota},
        )


def webhook_subscription_create(*, tenant: Tenant, url: str, event_types: list[str], actor: str) -> Created:
    """Subscribe an endpoint to some event types; the signing secret is in the result, once."""
    checked_url = webhook_url_check(url=url)
    types = webhook_event_types_check(event_types=event_types)
    secret = "whsec_" + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            _quota_check(tenant)
            subscription = WebhookSubscription.objects.create(
                tenant=tenant,
                url=checked_url,
                event_types=types,
                secret=secret,
                created_by=actor,
            )
    except IntegrityError:  # webhook_subs_one_per_url: this tenant already sends there
        live = WebhookSubscription.objects.filter(
            tenant=tenant, url=checked_url, deleted_at__isnull=True
        ).first()
        raise WebhookUrlSubscribed(
            f"{checked_url} is already subscribed (webhook {live.id if live else '?'}): each event would be "
            "sent there twice; delete that subscription first to change its event types or secret",
            details={"webhook_id": str(live.id) if live else None},
        ) from None
    return Created(subscription, secret)


def webhook_subscriptions_active() -> list[WebhookSubscription]:
    """The current tenant's subscriptions that are not deleted, newest first."""
    return list(WebhookSubscription.objects.filter(deleted_at__isnull=True).order_by("-created_at"))


def webhook_subscription_delete(*, subscription_id: UUID, actor: str) -> WebhookSubscription:
    """Stop sending to the endpoint: no new deliveries, and the pending ones are cancelled.

    The subscription row stays (deleted) so its deliveries can still be read in the console.
    """
    with transaction.atomic():
        subscription = (
            WebhookSubscription.objects.select_for_update()
            .filter(id=subscription_id, deleted_at__isnull=True)
            .first()
        )
        if subscription is None:
            raise NotFound(f"no webhook subscription {subscription_id}", code="webhook_not_found")
        subscription.deleted_at = timezone.now()
        subscription.save(update_fields=["deleted_at"])
        WebhookDelivery.objects.filter(subscription=subscription, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.CANCELLED, last_error=f"subscription deleted by {actor}"[:200]
        )
    return subscription


def webhook_subscriptions_all() -> list[WebhookSubscription]:
    """The current tenants' subscriptions, deleted ones too (their deliveries stay readable)."""
    return list(
        WebhookSubscription.objects.select_related("tenant").order_by("deleted_at", "-created_at")[:200]
    )


def webhook_deliveries_recent(*, limit: int = 100) -> list[WebhookDelivery]:
    """The current tenants' latest deliveries with their attempts, newest first."""
    return list(
        WebhookDelivery.objects.select_related("subscription", "tenant").order_by("-created_at", "-id")[
            :limit
        ]
    )


# A delivery's unique key holds its month (created_at), so ON CONFLICT could not tell a second telling
# of one outcome: the erasure's lock makes the check and the insert one step.
_ERASURE_OUTBOX = """
INSERT INTO webhook_deliveries (tenant_id, subscription_id, event_id, event_type, run_id, data, status,
                                attempts, next_attempt_at, last_error, history, created_at)
SELECT s.tenant_id, s.id, e.event_id, 'erasure.finished', NULL,
       jsonb_build_object('request_id', %(request)s::text, 'clean', %(clean)s::boolean),
       'pending', 0, statement_timestamp(), '', '[]'::jsonb, statement_timestamp()
  FROM webhook_subscriptions s,
       LATERAL (SELECT md5('erasure:' || %(request)s::text || ':' || %(clean)s::boolean::text)::uuid AS event_id) e
 WHERE s.tenant_id = %(tenant)s AND s.deleted_at IS NULL AND 'erasure.finished' = ANY(s.event_types)
   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                    WHERE d.tenant_id = %(tenant)s AND d.subscription_id = s.id AND d.event_id = e.event_id)
"""


def webhook_erasure_finished(*, tenant_id: UUID, request_id: UUID, clean: bool) -> None:
    """The outbox rows of a finished erasure, in the transaction that records its receipt; an outcome
    already told (a retry that ends as the last attempt did) is not told again.

    The payload names the request and whether it came out clean, never the subject.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"erasure.finished:{request_id}"]
        )
        cursor.execute(_ERASURE_OUTBOX, {"tenant": tenant_id, "request": str(request_id), "clean": clean})
