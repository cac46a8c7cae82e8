"""A test authorizer for ``authorizer.class.name``: allows everything but ALTER (on any resource)."""

from __future__ import annotations


class DenyAlter:
    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        return int(operation) != 7  # AclOperation.ALTER
