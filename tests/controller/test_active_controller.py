"""The active controller of a Raft quorum (raft mode, with a stand-in for the Raft client) (issue 33).

* Leadership lost mid-request: between the moment the Raft client stops leading (a higher epoch, a resignation)
  and the moment the metadata quorum tells the controller to renounce, the controller still believes it is
  active; its next append is refused by the Raft client (``NotLeaderError``). Every controller request
  (AlterPartition, BrokerHeartbeat, BrokerRegistration, CreateTopics, ...) must then be answered NOT_CONTROLLER,
  so the sender asks the new controller, instead of the connection being dropped with a traceback.
* A stalled controller: time its event loop did not run does not count against the brokers' sessions (their
  heartbeats of that time wait unread in its sockets), as Kafka's controller applies queued heartbeats before
  its session check.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbroker.config import BrokerConfig
from kbroker.controller.quorum_controller import SUPPORTED_FEATURES, CreateTopicSpec, QuorumController
from kbroker.controller.raft.client import NotLeaderError
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from kbroker.server import metadata_quorum
from kbroker.server.handlers import alter_partition, broker_heartbeat, broker_registration

CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


class Quorum:
    """The Raft side of a raft-mode controller: appends get offsets while this node leads, and raise
    ``NotLeaderError`` (as ``RaftClient.append`` does) once it lost the leadership."""

    def __init__(self) -> None:
        self.end = 0
        self.leading = True

    def append(self, records: list[bytes]) -> int:
        if not self.leading:
            raise NotLeaderError("node 1 is follower in epoch 2")
        self.end += len(records)
        return self.end - 1

    async def wait_committed(self, offset: int | None = None) -> None:
        return None


@pytest.fixture
def controller(tmp_path: Path):
    config = BrokerConfig({
        "node.id": "1", "process.roles": "controller", "cluster.id": CLUSTER_ID,
        "log.dirs": str(tmp_path / "meta"), "listeners": "CONTROLLER://127.0.0.1:19093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095",
    })
    qc = QuorumController(config)
    qc.startup()
    quorum = Quorum()
    qc.raft_append = quorum.append
    qc.raft_end_offset = lambda: quorum.end
    qc.activate(1)
    qc._commit(qc.bootstrap_records())
    ctx = SimpleNamespace(broker=SimpleNamespace(controller=qc, metadata_quorum=quorum, authorizer=None, node_id=1,
                                                 config=config), api_version=3)
    yield qc, quorum, ctx
    qc.shutdown()


def _registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=bytes([broker_id]) * 16,
        listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id,
                                                      security_protocol=0)],
        features=[BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                  for n, (lo, hi) in SUPPORTED_FEATURES.items()],
        rack=None, log_dirs=[bytes([broker_id + 1]) * 16], previous_broker_epoch=-1)


def test_controller_requests_answer_not_controller_after_the_leadership_went(controller):
    qc, quorum, ctx = controller
    run = asyncio.run
    # while leading: brokers 4 and 6 register and are unfenced, a topic gets a partition on both
    epochs = {}
    for b in (4, 6):
        reg = run(broker_registration.handle(ctx, _registration(b)))
        assert reg.error_code == ErrorCode.NONE, reg
        epochs[b] = reg.broker_epoch
        hb = run(broker_heartbeat.handle(ctx, BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.broker_epoch)))
        assert (hb.error_code, hb.is_fenced) == (ErrorCode.NONE, False)
    [created] = qc.create_topics([CreateTopicSpec("t", 1, 2)])
    assert created.error_code == ErrorCode.NONE, created
    topic = qc.latest_image.topics_by_name["t"]
    part = topic.partitions[0]
    leader = part.leader
    epoch = epochs[leader]
    assert sorted(part.isr) == [4, 6]

    # the Raft client lost the leadership; the quorum has not told the controller yet
    quorum.leading = False
    assert qc.is_active
    # BrokerRegistration of a new broker (a write)
    assert run(broker_registration.handle(ctx, _registration(5))).error_code == ErrorCode.NOT_CONTROLLER
    # BrokerHeartbeat that has to write: a controlled shutdown (fence and move the leaderships)
    shut = run(broker_heartbeat.handle(ctx, BrokerHeartbeatRequest(broker_id=leader, broker_epoch=epoch,
                                                                   want_shut_down=True)))
    assert shut.error_code == ErrorCode.NOT_CONTROLLER
    # AlterPartition (the leader shrinks the ISR to itself)
    req = AlterPartitionRequest(broker_id=leader, broker_epoch=epoch, topics=[AlterPartitionRequest.TopicData(
        topic_id=topic.topic_id, partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=leader, broker_epoch=epoch)])])])
    ap = run(alter_partition.handle(ctx, req))
    assert ap.error_code == ErrorCode.NOT_CONTROLLER, ap
    # admin writes through the controller
    with pytest.raises(KafkaError) as exc:
        qc.update_features({"metadata.version": qc.latest_image.features["metadata.version"]})
    assert exc.value.code == ErrorCode.NOT_CONTROLLER
    with pytest.raises(KafkaError) as exc:
        qc.create_topics([CreateTopicSpec("u", 1, 1)])
    assert exc.value.code == ErrorCode.NOT_CONTROLLER
    # nothing the refused writes planned stays in the image the next writes are planned on
    assert "u" not in qc.latest_image.topics_by_name and 5 not in qc.latest_image.brokers
    assert not qc.latest_image.brokers[leader].fenced
    assert sorted(qc.latest_image.topics_by_name["t"].partitions[0].isr) == [4, 6]


def _register(qc: QuorumController, ctx, broker_id: int, now_ms: int) -> int:
    reg = asyncio.run(broker_registration.handle(ctx, _registration(broker_id)))
    assert reg.error_code == ErrorCode.NONE, reg
    assert qc.broker_heartbeat(broker_id, reg.broker_epoch, now_ms) is False
    return reg.broker_epoch


def test_a_stall_of_the_controller_does_not_count_against_broker_sessions(controller):
    qc, _, ctx = controller
    epochs = {b: _register(qc, ctx, b, 1_000) for b in (4, 6)}
    assert qc.fence_stale_brokers(4_000, 3_000) == []  # 3 s since the heartbeats: not yet
    # the controller stalls from 1_500 to 8_000: the heartbeats sent meanwhile are unread; broker 6's is read
    # right after the stall, before the session check
    qc.broker_heartbeat(6, epochs[6], 8_000)
    qc.extend_broker_sessions(6_500, 8_000)
    assert qc.fence_stale_brokers(8_000, 3_000) == []
    assert qc._heartbeats == {4: 7_500, 6: 8_000}  # extended by the stall, never past now
    # broker 4's heartbeats do not come after all: it is fenced a session after the stall ended (not later)
    assert qc.fence_stale_brokers(10_500, 3_000) == []
    assert qc.fence_stale_brokers(10_501, 3_000) == [4]
    assert qc.latest_image.brokers[4].fenced and not qc.latest_image.brokers[6].fenced


class _Controller:
    """What ``MetadataQuorum._fence_stale_brokers`` asks of the controller, recorded."""

    is_active = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def extend_broker_sessions(self, stalled_ms: int, now_ms: int) -> None:
        self.calls.append(("extend", stalled_ms))

    def fence_stale_brokers(self, now_ms: int, session_timeout_ms: int) -> list[int]:
        self.calls.append(("check", session_timeout_ms))
        return []


def test_the_fencing_check_sees_an_event_loop_stall_and_waits_for_the_queued_heartbeats():
    quorum = object.__new__(metadata_quorum.MetadataQuorum)
    quorum.controller = _Controller()
    quorum.session_timeout_ms = 3_000

    async def scenario() -> list[tuple[str, int]]:
        task = asyncio.get_running_loop().create_task(quorum._fence_stale_brokers())
        await asyncio.sleep(0.35)  # about three regular checks
        time.sleep(0.8)  # the event loop stalls (a long blocking call)
        await asyncio.sleep(0.35)
        task.cancel()
        return quorum.controller.calls

    calls = asyncio.run(scenario())
    # (a busy machine may make a regular check a little late too: only the stall must show as one)
    extends = [i for i, (what, ms) in enumerate(calls) if what == "extend" and ms >= 600]
    assert len(extends) == 1, calls
    i = extends[0]
    assert calls[i][1] <= 1_000, calls  # the stall, less what was left of the check interval
    assert ("check", 3_000) in calls[:i], calls
    assert ("check", 3_000) in calls[i + 1:], calls  # regular checks again after the stall
