"""ACLs in the metadata log (KIP-801): CreateAcls and DeleteAcls planned against a metadata image, DescribeAcls
answered from one. Nothing here does I/O.

ACLs are ``AccessControlEntryRecord`` / ``RemoveAccessControlEntryRecord`` in ``__cluster_metadata``, replayed
into ``MetadataImage.acls`` (ACL id -> :class:`~kbroker.security.acl.StandardAcl`).

CreateAcls, per ACL, as Kafka's ``AclApis`` and ``AclControlManager`` check it (the first failing check gives
INVALID_REQUEST with its message):

1. a CLUSTER ACL names ``kafka-cluster``: "The only valid name for the CLUSTER resource is kafka-cluster";
2. the name is not empty: "Invalid empty resource name";
3. the resource type is one of TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER: "Invalid
   resourceType <NAME>" (UNKNOWN for a code Kafka does not define), the pattern type LITERAL or PREFIXED
   ("Invalid patternType ..."), the operation neither UNKNOWN nor ANY ("Invalid operation ..."), the permission
   DENY or ALLOW ("Invalid permissionType ...");
4. the principal is ``Type:name``: "Could not parse principal from `<p>` (no colon is present separating the
   principal type from the principal name)".

A valid ACL equal to one that exists (or to an earlier one of the same request) succeeds without a second record;
each new one gets a fresh random id. The records of one request are committed together.

DeleteAcls: a filter with an UNKNOWN (or undefined) resource type or pattern type gets INVALID_REQUEST "Unknown
patternFilter.", one with an UNKNOWN operation or permission "Unknown entryFilter."; every other filter lists the
ACLs it matches (``AclBindingFilter.matches``), each of which is removed; an ACL matched by several filters is
listed by each and removed once. The removals of one request are committed together.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from kbroker.controller.image import MetadataImage
from kbroker.controller.uuids import random_uuid
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from kbroker.security.acl import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    principal_error,
)

__all__ = ["CLUSTER_NAME", "acl_record", "describe_acls", "plan_create_acls", "plan_delete_acls",
           "validate_new_acl"]

#: the one name of the CLUSTER resource
CLUSTER_NAME = "kafka-cluster"

#: (error code, error message or None)
Result = tuple[int, "str | None"]
#: (error code, error message or None, ACLs matched)
DeleteResult = tuple[int, "str | None", list[StandardAcl]]


def _name(enum_cls: type, code: int) -> str:
    try:
        return enum_cls(code).name
    except ValueError:
        return "UNKNOWN"


def validate_new_acl(acl: StandardAcl) -> str | None:
    """Why CreateAcls refuses ``acl`` (INVALID_REQUEST with this message), or None (rules in the module
    docstring)."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if _name(ResourceType, acl.resource_type) in ("UNKNOWN", "ANY"):
        return f"Invalid resourceType {_name(ResourceType, acl.resource_type)}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {_name(PatternType, acl.pattern_type)}"
    if _name(AclOperation, acl.operation) in ("UNKNOWN", "ANY"):
        return f"Invalid operation {_name(AclOperation, acl.operation)}"
    if acl.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {_name(AclPermissionType, acl.permission_type)}"
    return principal_error(acl.principal)


def acl_record(acl_id: bytes, acl: StandardAcl) -> AccessControlEntryRecord:
    """The ``AccessControlEntryRecord`` of ``acl`` with id ``acl_id``."""
    return AccessControlEntryRecord(id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name,
                                    pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                                    operation=acl.operation, permission_type=acl.permission_type)


def plan_create_acls(image: MetadataImage, creations: Sequence[StandardAcl]
                     ) -> tuple[list[AccessControlEntryRecord], list[Result]]:
    """CreateAcls against ``image`` (the controller's latest): the records to commit and one ``(error code,
    message)`` per creation, in request order."""
    existing = set(image.acls.values())
    ids = set(image.acls)
    records: list[AccessControlEntryRecord] = []
    results: list[Result] = []
    for acl in creations:
        problem = validate_new_acl(acl)
        if problem is not None:
            results.append((ErrorCode.INVALID_REQUEST, problem))
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = random_uuid()
            while acl_id in ids:
                acl_id = random_uuid()
            ids.add(acl_id)
            records.append(acl_record(acl_id, acl))
        results.append((ErrorCode.NONE, None))
    return records, results


def plan_delete_acls(image: MetadataImage, filters: Sequence[AclBindingFilter]
                     ) -> tuple[list[RemoveAccessControlEntryRecord], list[DeleteResult]]:
    """DeleteAcls against ``image``: the removals to commit and one ``(error code, message, matched ACLs)`` per
    filter, in request order (matched ACLs by :meth:`StandardAcl.sort_key`)."""
    removed: dict[bytes, None] = {}
    results: list[DeleteResult] = []
    for acl_filter in filters:
        problem = acl_filter.unknown_part()
        if problem is not None:
            results.append((ErrorCode.INVALID_REQUEST, problem, []))
            continue
        matched = sorted(((acl_id, acl) for acl_id, acl in image.acls.items() if acl_filter.matches(acl)),
                         key=lambda item: item[1].sort_key())
        for acl_id, _ in matched:
            removed.setdefault(acl_id)
        results.append((ErrorCode.NONE, None, [acl for _, acl in matched]))
    return [RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed], results


def describe_acls(acls: Iterable[StandardAcl], acl_filter: AclBindingFilter
                  ) -> tuple[int, str | None, list[tuple[tuple[int, str, int], list[StandardAcl]]]]:
    """DescribeAcls: ``(error code, message, [((resource type, name, pattern type), ACLs)])`` with the ACLs that
    match ``acl_filter`` grouped by resource pattern, sorted; INVALID_REQUEST with "Unknown patternFilter." /
    "Unknown entryFilter." for a filter with an undefined code."""
    problem = acl_filter.unknown_part()
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem, []
    groups: dict[tuple[int, str, int], list[StandardAcl]] = {}
    for acl in sorted((a for a in acls if acl_filter.matches(a)), key=StandardAcl.sort_key):
        groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return ErrorCode.NONE, None, list(groups.items())
