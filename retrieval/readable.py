"""What a principal may read in a tenant, from retrieval_acls (one row per distinct ACL, with the
count of current chunks that carry it): its principal set, the ACL keys it may read, and how many
chunks those hold of how many the tenant holds. Read inside the tenant scope."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from core.errors import NotFound


class UnknownPrincipal(NotFound):
    code = "unknown_principal"


@dataclass(frozen=True)
class Readable:
    """What a principal may read in a tenant: its principal set (the user and its groups), the keys
    of the tenant's ACLs that overlap it and hold current chunks, how many current chunks those hold,
    and how many the tenant holds (retrieval_acls' counts, migration 0004)."""

    acl: list[str]
    keys: list[UUID]
    chunks: int
    tenant_chunks: int


# The principal set's keys and counts from the small retrieval_acls (one row per distinct ACL), in
# one pass over the tenant's rows, so this costs the same however many chunks there are. An ACL no
# current chunk carries is left out of the keys. No principal row: no row.
READABLE = """
    SELECT s.acl,
           coalesce(array_agg(a.acl_key ORDER BY a.acl_key) FILTER (WHERE a.acl && s.acl AND a.chunks > 0), '{{}}'),
           coalesce(sum(a.chunks) FILTER (WHERE a.acl && s.acl), 0),
           coalesce(sum(a.chunks), 0)
      FROM ({principals}) AS s LEFT JOIN retrieval_acls a ON a.tenant_id = %(tenant)s
     GROUP BY s.acl"""


def acl_readable(cursor: Any, *, tenant_id: UUID, acl: list[str]) -> Readable:
    """Readable for a principal set given as its ACL entries (inside the tenant scope)."""
    cursor.execute(
        READABLE.format(principals="SELECT %(acl)s::text[] AS acl"), {"tenant": tenant_id, "acl": acl}
    )
    row = cursor.fetchone()
    return Readable(
        acl=list(row[0]),
        keys=list(row[1]),
        chunks=int(row[2]),
        tenant_chunks=int(row[3]),
    )


def principal_readable(cursor: Any, *, tenant_id: UUID, principal: str) -> Readable:
    """The principal with its groups, the ACL keys they may read and the counts, in one statement
    (inside the tenant scope); unknown principal -> UnknownPrincipal."""
    cursor.execute(
        READABLE.format(
            principals="SELECT ARRAY[principal] || groups AS acl FROM retrieval_principals WHERE principal = %(principal)s"
        ),
        {"tenant": tenant_id, "principal": principal},
    )
    row = cursor.fetchone()
    if row is None:
        raise UnknownPrincipal(
            f"no principal {principal[:80]!r} in this tenant (add it with its groups first)"
        )
    return Readable(acl=list(row[0]), keys=list(row[1]), chunks=int(row[2]), tenant_chunks=int(row[3]))


def readable_acl_keys(cursor: Any, *, tenant_id: UUID, acl: list[str]) -> list[UUID]:
    """The keys of the tenant's distinct chunk ACLs this principal set may read that current chunks
    carry (retrieval_acls is small: one row per distinct ACL, so this scan costs the same however
    many chunks there are)."""
    cursor.execute(
        "SELECT acl_key FROM retrieval_acls WHERE tenant_id = %s AND acl && %s::text[] AND chunks > 0 "
        "ORDER BY acl_key",
        [tenant_id, acl],
    )
    return [row[0] for row in cursor.fetchall()]
