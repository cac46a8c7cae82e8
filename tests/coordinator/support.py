"""A deterministic harness for the group coordinator: fake clock, in-memory log, one shard."""

from __future__ import annotations

import itertools
from typing import Any

from kbroker.coordinator.group.config import GroupCoordinatorConfig
from kbroker.coordinator.group.records import GROUP_COORDINATOR_SERDE
from kbroker.coordinator.group.shard import CommitPartition, GroupCoordinatorShard, OffsetCommitInput, RequestMeta
from kbroker.coordinator.runtime import (
    CoordinatorRuntime,
    InMemoryPartitionWriter,
    ManualScheduler,
)
from kbroker.protocol.messages import JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse

SERDE = GROUP_COORDINATOR_SERDE
PARTITION = 0


class Parked:
    """Where a JoinGroup/SyncGroup answer lands; empty while the request is parked."""

    def __init__(self) -> None:
        self.responses: list[Any] = []

    def __call__(self, response: Any) -> None:
        self.responses.append(response)

    @property
    def done(self) -> bool:
        return bool(self.responses)

    @property
    def response(self) -> Any:
        assert len(self.responses) == 1, f"expected one response, got {self.responses}"
        return self.responses[0]


class Harness:
    def __init__(self, writer: InMemoryPartitionWriter | None = None, scheduler: ManualScheduler | None = None,
                 **config: Any) -> None:
        config.setdefault("group_initial_rebalance_delay_ms", 0)
        self.config = GroupCoordinatorConfig(**config)
        self.scheduler = scheduler or ManualScheduler()
        self.writer = writer or InMemoryPartitionWriter()
        self._ids = itertools.count(1)
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            self.writer, self.scheduler, self._build, SERDE, name="test-coordinator")
        self.runtime.load(PARTITION)

    def _build(self, partition: int, timer: Any) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(partition, self.config, timer, self.scheduler.now_ms,
                                     new_member_id=lambda prefix: f"{prefix}-{next(self._ids)}")

    @property
    def shard(self) -> GroupCoordinatorShard:
        return self.runtime.shard(PARTITION)

    def group(self, group_id: str) -> Any:
        return self.shard.groups[group_id]

    def advance(self, ms: int = 0) -> None:
        self.scheduler.advance(ms)

    def reload(self) -> Harness:
        """A new coordinator that rebuilds its state from this one's log (its own clock, starting at this
        one's time, so its timers never fire into the shared log unless the test advances it)."""
        return Harness(writer=self.writer, scheduler=ManualScheduler(self.scheduler.now_ms()), **self.config.__dict__)

    # ---- requests
    def join(self, group_id: str, member_id: str = "", *, instance_id: str | None = None, version: int = 9,
             protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
             rebalance_ms: int = 30_000, client_id: str = "client", protocol_type: str = "consumer") -> Parked:
        box = Parked()
        request = JoinGroupRequest(
            group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, member_id=member_id,
            group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                       for n, m in (protocols or [("range", b"meta")])])
        self.runtime.write(PARTITION, lambda s: s.join_group(RequestMeta(version, client_id, "/127.0.0.1"),
                                                              request, box))
        return box

    def join_new(self, group_id: str, **kw: Any) -> Parked:
        """The v4+ round trip: MEMBER_ID_REQUIRED, then JoinGroup with the given id (parked or answered)."""
        first = self.join(group_id, **kw).response
        assert first.error_code == 79, first
        return self.join(group_id, first.member_id, **kw)

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             instance_id: str | None = None, version: int = 5, protocol_type: str | None = None,
             protocol_name: str | None = None) -> Parked:
        box = Parked()
        request = SyncGroupRequest(
            group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])
        self.runtime.write(PARTITION, lambda s: s.sync_group(RequestMeta(version), request, box))
        return box

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        return self.runtime.write(PARTITION, lambda s: s.heartbeat(RequestMeta(4), group_id, generation, member_id,
                                                                   instance_id))

    def leave(self, group_id: str, *members: tuple[str, str | None]) -> tuple[int, list[int]]:
        return self.runtime.write(PARTITION, lambda s: s.leave_group(
            RequestMeta(5), group_id, [(m, i, "test") for m, i in members]))

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
               member_id: str = "", instance_id: str | None = None, metadata: str | None = "",
               version: int = 9, retention_ms: int = -1, leader_epoch: int = -1) -> dict[tuple[str, int], int]:
        parts = [CommitPartition(topic=t, partition=p, offset=o, leader_epoch=leader_epoch, metadata=metadata)
                 for (t, p), o in offsets.items()]
        commit = OffsetCommitInput(group_id, generation, member_id, instance_id, retention_ms, parts)
        result = self.runtime.write(PARTITION, lambda s: s.commit_offsets(RequestMeta(version), commit))
        return {(p.topic, p.partition): p.error_code for p in result}

    def fetch(self, group_id: str, topics: list[tuple[str, list[int]]] | None = None) -> dict[tuple[str, int], Any]:
        out = self.runtime.read(PARTITION, lambda s: s.fetch_offsets(group_id, topics))
        return {(o.topic, o.partition): (o.committed_offset, o.metadata, o.leader_epoch) for o in out}

    # ---- composite
    def stable_group(self, group_id: str, n: int, **kw: Any) -> list[str]:
        """Bring ``n`` dynamic members into a Stable group; returns their member ids (leader first)."""
        boxes = [self.join_new(group_id, client_id=f"c{i}", **kw) for i in range(n)]
        self.advance(0)
        self.advance(self.config.group_initial_rebalance_delay_ms)
        # the first rebalance may have completed before later members joined: let everybody rejoin
        for _ in range(3):
            if all(b.done for b in boxes) and len({b.responses[-1].generation_id for b in boxes}) == 1 \
                    and all(b.responses[-1].error_code == 0 for b in boxes):
                break
            for i, b in enumerate(boxes):
                if b.done:
                    last = b.responses[-1]
                    boxes[i] = self.join(group_id, last.member_id, client_id=f"c{i}", **kw)
            self.advance(0)
        responses = [b.responses[-1] for b in boxes]
        leader = responses[0].leader
        generation = responses[0].generation_id
        members = [r.member_id for r in responses]
        assignment = {m: f"assignment-{m}".encode() for m in members}
        syncs = [self.sync(group_id, m, generation, assignment if m == leader else None) for m in members]
        assert all(s.done and s.response.error_code == 0 for s in syncs), [s.responses for s in syncs]
        return [leader] + [m for m in members if m != leader]


def join_response(box: Parked) -> JoinGroupResponse:
    return box.response


def sync_response(box: Parked) -> SyncGroupResponse:
    return box.response
