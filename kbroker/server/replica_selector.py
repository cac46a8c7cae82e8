"""Which replica a consumer should fetch from (KIP-392): the leader's choice of a *preferred read replica*.

``replica.selector.class`` names the selector, as in Kafka. Unset (the default) the leader serves every consumer
and never names another replica. :data:`RACK_AWARE` (Kafka's ``RackAwareReplicaSelector``) picks a replica in the
consumer's rack (its Fetch v11+ ``RackId``, the client's ``client.rack``). Kafka loads any class implementing its
``ReplicaSelector`` interface; kbroker knows only this one, and ``validate_server_config`` refuses other names at
start-up.

The candidates are Kafka's (``ReplicaManager.findPreferredReadReplica``): the leader itself, and every follower
that is in the ISR and whose log, as its last Fetch told the leader, holds the fetch offset (its log start offset
<= the offset <= its log end offset). A replica counts only if its broker is registered and unfenced and has an
endpoint on the listener the consumer came in on (Kafka's metadata cache lists only those); any other has no rack.

The rack-aware choice: no client rack, or no candidate in it: the leader; the leader in the client's rack: the
leader; else the candidate in that rack with the highest log end offset, then the one caught up most recently.
The leader is never named in an answer: ``preferred_read_replica`` is -1 then and the leader serves the fetch.

Pure functions of the partition's state and the metadata image: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
"""The one ``replica.selector.class`` kbroker implements."""

SELECTORS = (RACK_AWARE,)


@dataclass(frozen=True)
class ReplicaView:
    """One candidate replica as the selector sees it (Kafka's ``ReplicaView``)."""

    node_id: int
    #: the rack of its broker; None when it has none or the broker is not reachable on the client's listener
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


def rack_aware_select(client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
    """Kafka's ``RackAwareReplicaSelector.select``: the replica to read from (``leader`` when none is better)."""
    if not client_rack:
        return leader
    same_rack = [r for r in replicas if r.rack == client_rack]
    if not same_rack or leader in same_rack:
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms))


def _rack_if_reachable(image: Any, node_id: int, listener: str) -> str | None:
    reg = image.brokers.get(node_id)
    if reg is None or reg.fenced or reg.endpoint(listener) is None:
        return None
    return reg.rack


def preferred_read_replica(selector: str, part: Any, client_rack: str, fetch_offset: int, image: Any,
                           listener: str, now_ms: int) -> int:
    """The replica a consumer in ``client_rack`` fetching ``part`` (led here) at ``fetch_offset`` should read
    from, if not this leader; else -1 (no selector, no client rack, or the leader is the best choice)."""
    if selector != RACK_AWARE or not client_rack or not part.is_leader:
        return -1
    leader = ReplicaView(part.local_id, _rack_if_reachable(image, part.local_id, listener), part.log_end_offset, 0)
    candidates = [leader]
    for node_id, state in part.followers.items():
        if node_id not in part.isr or not state.log_start_offset <= fetch_offset <= state.log_end_offset:
            continue
        candidates.append(ReplicaView(node_id, _rack_if_reachable(image, node_id, listener), state.log_end_offset,
                                      now_ms - state.last_caught_up_ms))
    chosen = rack_aware_select(client_rack, leader, candidates)
    return -1 if chosen is leader or chosen.rack is None else chosen.node_id
