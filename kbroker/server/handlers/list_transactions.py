"""ListTransactions (API key 66), versions 0-2.

Behavior:
* every transactional id of the ``__transaction_state`` partitions this node serves, with producer id and
  state; filters: states (names unknown to Kafka are returned in ``UnknownStateFilters`` and match nothing),
  producer ids, (v1) transactions running for at least ``DurationFilter`` ms, (v2) a regular expression the
  whole transactional id must match (INVALID_REGULAR_EXPRESSION if it does not compile);
* COORDINATOR_LOAD_IN_PROGRESS while a partition is still loading (the ids of the loaded ones are listed);
* answered once the in-sync replicas hold what was read.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ListTransactionsRequest, ListTransactionsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.LIST_TRANSACTIONS
VERSIONS = range(0, 3)


async def handle(ctx, request: ListTransactionsRequest) -> ListTransactionsResponse:
    version = ctx.api_version
    resp = await ctx.broker.transaction_coordinator.list_transactions(
        list(request.state_filters), list(request.producer_id_filters),
        request.duration_filter if version >= 1 else -1,
        request.transactional_id_pattern if version >= 2 else None)
    if ctx.broker.authorizer is not None:  # only the ids the caller may DESCRIBE, as Kafka
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                          [s.transactional_id for s in resp.transaction_states], log_denied=False)
        resp.transaction_states = [s for s in resp.transaction_states if s.transactional_id in allowed]
    return resp
