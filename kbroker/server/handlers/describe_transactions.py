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
from kbroker.protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
VERSIONS = range(0, 1)


async def handle(ctx, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    tc = ctx.broker.transaction_coordinator
    return DescribeTransactionsResponse(transaction_states=[await tc.describe(t) for t in request.transactional_ids])
