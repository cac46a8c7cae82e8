"""DescribeTransactions (API key 65), version 0.

Behavior:
* per transactional id: state (Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
  CompleteAbort), producer id and epoch, timeout, start time (-1 outside a transaction) and the partitions
  of the open transaction; TRANSACTIONAL_ID_NOT_FOUND for unknown (or expired) ids, INVALID_REQUEST for an
  empty id, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when its partition is not served here;
* answered once the in-sync replicas of the id's ``__transaction_state`` partition hold what was read.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
VERSIONS = range(0, 1)


async def handle(ctx, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    tc = ctx.broker.transaction_coordinator
    if ctx.broker.authorizer is None:
        return DescribeTransactionsResponse(transaction_states=[await tc.describe(t)
                                                                for t in request.transactional_ids])
    states = []
    for txn_id in request.transactional_ids:
        if not common.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            states.append(DescribeTransactionsResponse.TransactionState(
                transactional_id=txn_id, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        state = await tc.describe(txn_id)
        # only the partitions of topics the caller may DESCRIBE, as Kafka
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                          [t.topic for t in state.topics])
        state.topics = [t for t in state.topics if t.topic in allowed]
        states.append(state)
    return DescribeTransactionsResponse(transaction_states=states)
