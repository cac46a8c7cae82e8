"""The transaction coordinator: transactional ids and their transactions, stored in ``__transaction_state``.

``metadata`` (states, valid transitions, the record), ``shard`` (one partition's operations), ``service``
(the broker-facing :class:`TransactionCoordinator`: topic creation, loading, marker writing, timers),
``producer_id_manager`` (producer id blocks from the controller). See ``docs/transactions.md``.
"""
