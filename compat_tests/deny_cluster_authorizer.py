"""A test authorizer for ``authorizer.class.name``: denies ALTER and DESCRIBE on the CLUSTER resource (what
AlterUserScramCredentials and DescribeUserScramCredentials need) to every principal, allows everything else."""

from __future__ import annotations


class DenyClusterAlterDescribe:
    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        return not (int(resource_type) == 4 and int(operation) in (7, 8))  # CLUSTER; ALTER, DESCRIBE


class DenyClusterConfigs:
    """Denies ALTER_CONFIGS and DESCRIBE_CONFIGS on the CLUSTER resource (what AlterClientQuotas and
    DescribeClientQuotas need) to every principal, allows everything else."""

    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        return not (int(resource_type) == 4 and int(operation) in (10, 11))  # CLUSTER; DESCRIBE/ALTER_CONFIGS
