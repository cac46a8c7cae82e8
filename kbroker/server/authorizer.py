"""Who may do what: the authorizer seam and the ``authorized_operations`` answers (Kafka's ``Authorizer`` and
``AuthHelper.authorizedOperations``).

Operations and resource types carry Kafka's codes (``AclOperation``, ``ResourceType``). A resource type supports
a fixed set of operations (Kafka's ACL model); ``authorized_operations`` is the bitfield (bit ``1 << code``)
of those the caller may perform. With no authorizer (``authorizer.class.name`` empty, the default) every
supported operation is allowed, as in Kafka. With one, each supported operation is asked of it, and ``ALL`` /
``ANY`` are never listed.

An authorizer is any class with ``authorize(principal, operation, resource_type, resource_name, host) -> bool``
(principal ``"User:alice"``, operation an ``AclOperation``, resource type a ``ResourceType``, the resource's name
(``kafka-cluster`` for the cluster), host the client's IP address as a string, ``""`` when unknown), named by
its dotted Python path in ``authorizer.class.name`` and built with the broker's properties (``cls(props)`` if it
takes them, else ``cls()``). It may also have ``authorize_by_resource_type(principal, operation, resource_type,
host) -> bool`` (Kafka's ``Authorizer.authorizeByResourceType``: may the principal perform the operation on some
resource of the type; InitProducerId without a transactional id asks it for WRITE on topics, KIP-679); without
it :func:`authorize_any` asks ``authorize`` of each existing resource. The principal is ``User:ANONYMOUS``
unless the connection came with a TLS client certificate (``ssl.principal.mapping.rules`` of the listener) or
authenticated with SASL. What each request needs is checked by the handlers (``handlers/common.authorize``),
as Kafka's ``KafkaApis`` / ``ControllerApis`` do.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Iterable, Mapping, Protocol

from kbroker.security.acl import AclOperation, ResourceType  # Kafka's codes, re-exported for the handlers


Op = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}
"""Kafka's ACL model: the operations each resource type supports."""

NOT_REQUESTED = -(2**31)
"""``INT32_MIN``: what ``*_authorized_operations`` fields say when the request did not ask."""

ANONYMOUS = "User:ANONYMOUS"
#: ``authorizer.class.name`` values that select kbroker's ACL authorizer (``kbroker.security.acl.StandardAuthorizer``)
STANDARD_AUTHORIZER_NAMES = frozenset({"org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                       "kbroker.security.acl.StandardAuthorizer"})
CLUSTER_NAME = "kafka-cluster"


class Authorizer(Protocol):
    def authorize(self, principal: str, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str, host: str) -> bool: ...


def load_authorizer(props: Mapping[str, str]) -> Authorizer | None:
    """The authorizer named by ``authorizer.class.name`` (None when empty). Raises ``ValueError`` with one line
    when the class cannot be loaded."""
    name = (props.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name in STANDARD_AUTHORIZER_NAMES:  # kbroker's ACL authorizer, fed from the metadata image's ACLs
        from kbroker.security.acl import StandardAuthorizer

        return StandardAuthorizer(props)
    module, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"Invalid value {name} for configuration authorizer.class.name: cannot load it ({exc})") \
            from None
    try:
        takes_props = len(inspect.signature(cls).parameters) >= 1
    except (TypeError, ValueError):
        takes_props = False
    obj: Any = cls(dict(props)) if takes_props else cls()
    if not callable(getattr(obj, "authorize", None)):
        raise ValueError(f"Invalid value {name} for configuration authorizer.class.name: no authorize() method")
    return obj


def authorized_operations(authorizer: Authorizer | None, principal: str, resource_type: ResourceType,
                          resource_name: str, host: str = "") -> int:
    """The bitfield of the supported operations on the resource that ``principal`` (from ``host``) may perform."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.authorize(principal, op, resource_type, resource_name, host):
            bits |= 1 << int(op)
    return bits


def authorize_any(authorizer: Authorizer, principal: str, operation: AclOperation, resource_type: ResourceType,
                  host: str, names: Iterable[str]) -> bool:
    """Whether ``principal`` may perform ``operation`` on some resource of ``resource_type`` (Kafka's
    ``authorizeByResourceType``): the authorizer's own ``authorize_by_resource_type`` when it has one, else
    ``authorize`` asked of each of ``names`` (the existing resources) until one is allowed."""
    by_type = getattr(authorizer, "authorize_by_resource_type", None)
    if by_type is not None:
        return bool(by_type(principal, operation, resource_type, host))
    return any(authorizer.authorize(principal, operation, resource_type, name, host) for name in names)


def operations_of(bits: int) -> list[AclOperation]:
    """The operations in a bitfield (for tests and tools)."""
    return [op for op in AclOperation if bits >= 0 and bits & (1 << int(op))]
