"""A test authorizer for ``authorizer.class.name`` whose allow rules come from a JSON file, for a cluster whose
nodes must be authorized (CLUSTER_ACTION) before their quorum exists, i.e. before kbroker's own ACL authorizer
could hold an ACL (compat_tests/test_authorization.py).

The file is named by the broker property ``kbroker.test.acl.rules.file`` and holds a list of rules
``{"principal": "User:alice", "operation": "READ", "resource_type": "TOPIC", "name": "t"}`` (``name`` ``"*"``:
every resource of the type; ``principal`` ``"User:*"``: everyone). A principal listed in ``super.users``
(``;``-separated, as Kafka's) may do everything. Kafka's implied operations hold: READ, WRITE, DELETE and ALTER
imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies every operation. Everything else is denied
(``allow.everyone.if.no.acl.found=false``). The file is read again when it changes, so a test can change rules
on a running broker.
"""

from __future__ import annotations

import json
import os

RULES_PROPERTY = "kbroker.test.acl.rules.file"

_OPERATIONS = {"ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
               "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}
_RESOURCE_TYPES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
#: operation -> the operations whose grant implies it (besides itself and ALL)
_IMPLIED_BY = {8: (3, 4, 6, 7), 10: (11,)}


class RulesAuthorizer:
    def __init__(self, props: dict[str, str]) -> None:
        self.path = props.get(RULES_PROPERTY, "")
        self.super_users = {p.strip() for p in props.get("super.users", "").split(";") if p.strip()}
        self._mtime: float | None = None
        self._allowed: set[tuple[str, int, int, str]] = set()
        self._load()

    def _load(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime if self.path else None
        except OSError:
            mtime = None
        if mtime == self._mtime:
            return
        self._mtime = mtime
        rules = []
        if mtime is not None:
            with open(self.path, encoding="utf-8") as f:
                rules = json.load(f)
        self._allowed = {(r["principal"], _OPERATIONS[r["operation"].upper()],
                          _RESOURCE_TYPES[r["resource_type"].upper()], r.get("name", "*")) for r in rules}

    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        if principal in self.super_users:
            return True
        self._load()
        op, rtype = int(operation), int(resource_type)
        for granted in (op, 2, *_IMPLIED_BY.get(op, ())):
            for who in (principal, "User:*"):
                if (who, granted, rtype, resource_name) in self._allowed or (who, granted, rtype, "*") in self._allowed:
                    return True
        return False
