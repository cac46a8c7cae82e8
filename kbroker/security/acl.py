"""ACLs and kbroker's ACL authorizer, with the semantics of Kafka's ``StandardAuthorizer`` (KIP-801); no I/O.

An ACL (:class:`StandardAcl`, the fields of an ``AccessControlEntryRecord``) says that a ``principal``
(``Type:name``; ``User:*`` is every principal) connecting from ``host`` (an IP address string; ``*`` is every host)
is allowed or denied an ``operation`` on resources of one type whose name either equals ``resource_name``
(pattern LITERAL; the literal name ``*`` matches every resource of the type) or starts with it (PREFIXED).
Codes are Kafka's: :class:`AclOperation`, :class:`ResourceType`, :class:`PatternType`, :class:`AclPermissionType`.

:meth:`StandardAuthorizer.authorize` decides as Kafka's ``StandardAuthorizerData.authorize`` does:

1. a principal named in ``super.users`` (``;``-separated ``Type:name`` entries, compared as written) may do
   anything;
2. the ACLs *of the resource* are those of its type whose pattern matches its name: the literal name, the literal
   wildcard ``*``, every prefix of the name that has a PREFIXED ACL;
3. an ACL of the resource *applies* when its principal is the caller's or ``User:*``, its host the caller's or
   ``*``, and its operation is ALL or the one asked; an ALLOW ACL also applies to DESCRIBE when its operation is
   READ, WRITE, DELETE or ALTER, and to DESCRIBE_CONFIGS when it is ALTER_CONFIGS (a DENY ACL applies only to its
   own operation, or to every one with ALL: DENY READ does not deny DESCRIBE);
4. an applying DENY ACL denies, whatever ALLOW ACLs say; otherwise an applying ALLOW ACL allows;
5. with none applying: denied, except that ``allow.everyone.if.no.acl.found=true`` allows when the resource has no
   ACL at all (any principal, host, operation or permission: one ACL of the resource for somebody else is enough
   to deny everyone not named).

The authorizer keeps its ACLs indexed by (resource type, name) for literal ones and by (resource type, prefix) for
prefixed ones, with the set of prefix lengths in use per type, so a decision costs a few dictionary lookups however
many ACLs there are (``bench/acl_authorize.py``). It is fed from the metadata image (``MetadataImage.acls``, ACL
id -> :class:`StandardAcl`) by :meth:`StandardAuthorizer.load` and :meth:`StandardAuthorizer.update`.

:class:`AclBindingFilter` is the filter of DescribeAcls and DeleteAcls, with Kafka's ``AclBindingFilter.matches``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = [
    "ALLOW_EVERYONE_IF_NO_ACL_FOUND",
    "SUPER_USERS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "StandardAcl",
    "StandardAuthorizer",
    "parse_super_users",
    "principal_error",
]

#: config keys read by :class:`StandardAuthorizer` (Kafka's ``StandardAuthorizer`` keys)
SUPER_USERS = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND = "allow.everyone.if.no.acl.found"

#: the resource name and host that match every resource name and host
WILDCARD = "*"
#: the principal of ACLs that apply to every principal
WILDCARD_PRINCIPAL = "User:*"


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes: ACLs are LITERAL or PREFIXED; ANY and MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _known(enum_cls: type[enum.IntEnum], code: int) -> bool:
    """A code that names a member other than UNKNOWN (Kafka's ``fromCode`` maps anything else to UNKNOWN)."""
    return code != 0 and code in enum_cls._value2member_map_


def principal_error(principal: str) -> str | None:
    """Why ``principal`` is not a ``Type:name`` principal (Kafka's ``StandardAcl`` parsing), or None."""
    if ":" not in principal:
        return (f"Could not parse principal from `{principal}` (no colon is present separating the principal "
                f"type from the principal name)")
    return None


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL, as an ``AccessControlEntryRecord`` carries it (without its id); fields hold Kafka's codes."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def sort_key(self) -> tuple[int, str, int, str, str, int, int]:
        """Resource (type, name, pattern type), then principal, host, operation, permission: listings' order."""
        return (self.resource_type, self.resource_name, self.pattern_type, self.principal, self.host,
                self.operation, self.permission_type)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter (Kafka's ``AclBindingFilter``). ``None`` name, principal or host match
    any; resource type ANY, operation ANY and permission ANY match any; pattern type ANY matches both pattern types
    by exact name, MATCH matches the ACLs that would apply to a resource of that name (the literal name, the
    literal ``*`` and the prefixes of the name), LITERAL / PREFIXED only ACLs of that pattern type."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    def unknown_part(self) -> str | None:
        """"Unknown patternFilter." / "Unknown entryFilter." when a code is UNKNOWN or not one Kafka defines
        (Kafka's controller answers INVALID_REQUEST with that message), else None."""
        if not _known(ResourceType, self.resource_type) or not _known(PatternType, self.pattern_type):
            return "Unknown patternFilter."
        if not _known(AclOperation, self.operation) or not _known(AclPermissionType, self.permission_type):
            return "Unknown entryFilter."
        return None

    def matches(self, acl: StandardAcl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if (self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
                and self.pattern_type != acl.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type == PatternType.ANY or self.pattern_type == acl.pattern_type:
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH against a literal ACL
                if self.resource_name != acl.resource_name and acl.resource_name != WILDCARD:
                    return False
            elif acl.pattern_type == PatternType.PREFIXED:  # MATCH against a prefixed ACL
                if not self.resource_name.startswith(acl.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: ``;``-separated principals, each trimmed, empty entries skipped. Raises ``ValueError``
    for an entry that is not ``Type:name``."""
    users = set()
    for part in (text or "").split(";"):
        p = part.strip()
        if not p:
            continue
        if (problem := principal_error(p)) is not None:
            raise ValueError(f"Invalid value {text} for configuration {SUPER_USERS}: {problem}")
        users.add(p)
    return frozenset(users)


def _parse_bool(props: Mapping[str, str], key: str) -> bool:
    value = str(props.get(key, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"Invalid value {props.get(key)} for configuration {key}: Expected value to be either "
                         f"true or false")
    return value == "true"


_ALL = int(AclOperation.ALL)
_DESCRIBE = int(AclOperation.DESCRIBE)
_DESCRIBE_CONFIGS = int(AclOperation.DESCRIBE_CONFIGS)
_ALLOW = int(AclPermissionType.ALLOW)
_DENY = int(AclPermissionType.DENY)
_LITERAL = int(PatternType.LITERAL)
_PREFIXED = int(PatternType.PREFIXED)
#: operations whose ALLOW ACLs also allow DESCRIBE / DESCRIBE_CONFIGS
IMPLIES_DESCRIBE = frozenset(int(o) for o in (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                              AclOperation.DELETE, AclOperation.ALTER))
IMPLIES_DESCRIBE_CONFIGS = frozenset((int(AclOperation.DESCRIBE_CONFIGS), int(AclOperation.ALTER_CONFIGS)))

_NO_ACLS: dict[bytes, StandardAcl] = {}


class StandardAuthorizer:
    """kbroker's ACL authorizer (``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``);
    the rules are in the module docstring. Built with the broker's properties (``super.users``,
    ``allow.everyone.if.no.acl.found``; ``ValueError`` for a bad value). Not thread-safe: the event loop owns it."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        props = props or {}
        self.super_users = parse_super_users(props.get(SUPER_USERS))
        self.allow_everyone_if_no_acl_found = _parse_bool(props, ALLOW_EVERYONE_IF_NO_ACL_FOUND)
        self._by_id: dict[bytes, StandardAcl] = {}
        #: (resource type, name) -> {id: ACL} of LITERAL ACLs (name ``*`` included)
        self._literal: dict[tuple[int, str], dict[bytes, StandardAcl]] = {}
        #: (resource type, prefix) -> {id: ACL} of PREFIXED ACLs
        self._prefixed: dict[tuple[int, str], dict[bytes, StandardAcl]] = {}
        #: resource type -> {prefix length: number of prefixes of that length with ACLs}
        self._prefix_lengths: dict[int, dict[int, int]] = {}
        #: resource type -> the prefix lengths in use, ascending (rebuilt from _prefix_lengths on change)
        self._lengths: dict[int, tuple[int, ...]] = {}

    # ---- the ACLs ----
    def __len__(self) -> int:
        return len(self._by_id)

    def load(self, acls: Mapping[bytes, StandardAcl]) -> None:
        """Replace every ACL by ``acls`` (ACL id -> ACL), as after loading a metadata image."""
        self._by_id.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        self._lengths.clear()
        for acl_id, acl in acls.items():
            self.add_acl(acl_id, acl)

    def update(self, acls: Mapping[bytes, StandardAcl], changed: Iterable[bytes]) -> None:
        """Apply the ACLs of ``changed`` ids as ``acls`` (the new image's) now has them: added, replaced or gone."""
        for acl_id in changed:
            self.remove_acl(acl_id)
            acl = acls.get(acl_id)
            if acl is not None:
                self.add_acl(acl_id, acl)

    def add_acl(self, acl_id: bytes, acl: StandardAcl) -> None:
        """Add (or replace) the ACL with id ``acl_id``."""
        if acl_id in self._by_id:
            self.remove_acl(acl_id)
        self._by_id[acl_id] = acl
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == _PREFIXED:
            bucket = self._prefixed.get(key)
            if bucket is None:
                bucket = self._prefixed[key] = {}
                counts = self._prefix_lengths.setdefault(acl.resource_type, {})
                n = len(acl.resource_name)
                counts[n] = counts.get(n, 0) + 1
                self._lengths[acl.resource_type] = tuple(sorted(counts))
            bucket[acl_id] = acl
        else:
            self._literal.setdefault(key, {})[acl_id] = acl

    def remove_acl(self, acl_id: bytes) -> None:
        """Remove the ACL with id ``acl_id`` (nothing happens if there is none)."""
        acl = self._by_id.pop(acl_id, None)
        if acl is None:
            return
        key = (acl.resource_type, acl.resource_name)
        index = self._prefixed if acl.pattern_type == _PREFIXED else self._literal
        bucket = index[key]
        del bucket[acl_id]
        if bucket:
            return
        del index[key]
        if acl.pattern_type == _PREFIXED:
            counts = self._prefix_lengths[acl.resource_type]
            n = len(acl.resource_name)
            counts[n] -= 1
            if not counts[n]:
                del counts[n]
            self._lengths[acl.resource_type] = tuple(sorted(counts))

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[StandardAcl]:
        """The ACLs matching ``acl_filter`` (all without one), by :meth:`StandardAcl.sort_key`."""
        found = [a for a in self._by_id.values() if acl_filter is None or acl_filter.matches(a)]
        return sorted(found, key=StandardAcl.sort_key)

    # ---- decisions ----
    def resource_acls(self, resource_type: int, resource_name: str) -> list[dict[bytes, StandardAcl]]:
        """The buckets of ACLs of a resource (rule 2): literal name, prefixes of the name, literal ``*``."""
        rtype = int(resource_type)
        buckets = []
        literal = self._literal.get((rtype, resource_name))
        if literal is not None:
            buckets.append(literal)
        lengths = self._lengths.get(rtype)
        if lengths:
            prefixed = self._prefixed
            size = len(resource_name)
            for n in lengths:
                if n > size:
                    break
                bucket = prefixed.get((rtype, resource_name[:n]))
                if bucket is not None:
                    buckets.append(bucket)
        if resource_name != WILDCARD:
            wildcard = self._literal.get((rtype, WILDCARD))
            if wildcard is not None:
                buckets.append(wildcard)
        return buckets

    def authorize(self, principal: str, operation: AclOperation, resource_type: ResourceType, resource_name: str,
                  host: str) -> bool:
        """Whether ``principal`` (``Type:name``) connecting from ``host`` (the client's IP address) may perform
        ``operation`` on the resource ``resource_type`` / ``resource_name`` (rules in the module docstring)."""
        if principal in self.super_users:
            return True
        op = int(operation)
        allowed = False
        found = False
        for bucket in self.resource_acls(resource_type, resource_name):
            for acl in bucket.values():
                found = True
                if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.host != WILDCARD and acl.host != host:
                    continue
                acl_op = acl.operation
                if acl.permission_type == _DENY:
                    if acl_op == op or acl_op == _ALL:
                        return False
                elif acl.permission_type == _ALLOW and not allowed:
                    if acl_op == op or acl_op == _ALL:
                        allowed = True
                    elif op == _DESCRIBE:
                        allowed = acl_op in IMPLIES_DESCRIBE
                    elif op == _DESCRIBE_CONFIGS:
                        allowed = acl_op in IMPLIES_DESCRIBE_CONFIGS
        return allowed or (not found and self.allow_everyone_if_no_acl_found)

    def authorize_by_resource_type(self, principal: str, operation: AclOperation, resource_type: ResourceType,
                                   host: str) -> bool:
        """Whether ``principal`` from ``host`` may perform ``operation`` on some resource of ``resource_type``
        (Kafka's ``Authorizer.authorizeByResourceType``, KIP-679; e.g. InitProducerId without a transactional id
        needs WRITE on some topic): allowed when a resource named ``hardcode`` would be (so super users and
        ``allow.everyone.if.no.acl.found`` pass), or when an ALLOW ACL of the caller (operation ALL or exactly
        ``operation``, no implied ones) is the literal ``*``, or a literal name not also denied literally, or a
        name no prefix of which is denied by a PREFIXED DENY ACL; a literal ``*`` DENY ACL denies."""
        if self.authorize(principal, operation, resource_type, "hardcode", host):
            return True
        op, rtype = int(operation), int(resource_type)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        for acl in self._by_id.values():
            if acl.resource_type != rtype or (acl.host != WILDCARD and acl.host != host):
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != _ALL:
                continue
            if acl.permission_type == _DENY:
                if acl.pattern_type == _LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                elif acl.pattern_type == _PREFIXED:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission_type == _ALLOW and acl.pattern_type in (_LITERAL, _PREFIXED):
                allow.append((acl.pattern_type, acl.resource_name))
        if any(p == _LITERAL and name == WILDCARD for p, name in allow):
            return True
        for pattern_type, name in allow:
            if pattern_type == _LITERAL and name in deny_literal:
                continue
            if not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1)):
                return True
        return False
