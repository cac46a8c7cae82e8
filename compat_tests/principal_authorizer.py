"""A test authorizer for ``authorizer.class.name``: the principal ``User:ALICE@ENG`` may do everything, any other
principal only DESCRIBE and READ (so ``authorized_operations`` in answers tell which principal a connection has,
and others can still consume)."""

from __future__ import annotations


class AliceOnly:
    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        return principal == "User:ALICE@ENG" or int(operation) in (3, 8)  # AclOperation.READ, DESCRIBE
