"""A test authorizer for ``authorizer.class.name``: the principal ``User:ALICE@ENG`` may do everything, any other
principal only DESCRIBE (so ``authorized_operations`` in answers tell which principal a connection has)."""

from __future__ import annotations


class AliceOnly:
    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        return principal == "User:ALICE@ENG" or int(operation) == 8  # AclOperation.DESCRIBE
