"""Property: whatever the clients do, replaying ``__consumer_offsets`` rebuilds the durable state.

Random sequences of JoinGroup (dynamic and static), SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
DeleteGroups and passing time run against one shard. After every step: a coordinator loaded from the log
has the same committed offsets, and every group that is Stable or Empty in memory has the same state,
generation, protocol, leader, members and assignments after the reload; parked requests are answered at
most once; members wait for JoinGroup only in PreparingRebalance and for SyncGroup only in
CompletingRebalance.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kbroker.coordinator.group.classic_group import ClassicGroupState as S
from tests.coordinator.support import Harness, Parked

GROUPS = ["g1", "g2"]
CLIENTS = ["a", "b", "c"]
INSTANCES = [None, None, "static-1", "static-2"]


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(group_initial_rebalance_delay_ms=50, offsets_retention_ms=40_000,
                         offsets_retention_check_interval_ms=5_000)
        self.boxes: list[Parked] = []
        # what each client believes: (group, client) -> (member id, generation)
        self.known: dict[tuple[str, str], tuple[str, int]] = {}

    def _learn(self, group: str, client: str, box: Parked) -> None:
        self.boxes.append(box)
        if box.done:
            r = box.responses[-1]
            if getattr(r, "member_id", ""):
                self.known[(group, client)] = (r.member_id, getattr(r, "generation_id", -1))

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(CLIENTS), instance=st.sampled_from(INSTANCES),
          fresh=st.booleans(), protocols=st.sampled_from([["range"], ["roundrobin", "range"], ["range", "sticky"]]))
    def join(self, group, client, instance, fresh, protocols):
        member_id = "" if fresh else self.known.get((group, client), ("", -1))[0]
        box = self.h.join(group, member_id, instance_id=instance, client_id=client, session_ms=6_000,
                          rebalance_ms=8_000, protocols=[(p, p.encode()) for p in protocols])
        self._learn(group, client, box)

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(CLIENTS), assign=st.booleans())
    def sync(self, group, client, assign):
        member_id, generation = self.known.get((group, client), ("x", 0))
        g = self.h.shard.groups.get(group)
        assignments = {m: f"{m}@{generation}".encode() for m in (g.members if g else [])} if assign else {}
        box = self.h.sync(group, member_id, generation, assignments)
        self.boxes.append(box)

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(CLIENTS))
    def heartbeat(self, group, client):
        member_id, generation = self.known.get((group, client), ("x", 0))
        self.h.heartbeat(group, member_id, generation)

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(CLIENTS))
    def leave(self, group, client):
        member_id, _ = self.known.get((group, client), ("x", 0))
        self.h.leave(group, (member_id, None))

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(CLIENTS), partition=st.integers(0, 2),
          offset=st.integers(0, 1000), simple=st.booleans())
    def commit(self, group, client, partition, offset, simple):
        member_id, generation = ("", -1) if simple else self.known.get((group, client), ("x", 0))
        self.h.commit(group, {("t", partition): offset}, generation=generation, member_id=member_id,
                      metadata=f"m{offset}")

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group):
        self.h.runtime.write(0, lambda s: s.delete_groups([group]))

    @rule(ms=st.sampled_from([0, 10, 50, 1_000, 3_000, 6_000, 9_000, 45_000]))
    def tick(self, ms):
        self.h.advance(ms)

    @invariant()
    def replay_rebuilds_durable_state(self):
        live = self.h.shard
        reloaded = self.h.reload().shard
        assert reloaded.offsets == live.offsets
        for group_id, g in live.groups.items():
            if g.state not in (S.STABLE, S.EMPTY):
                continue
            r = reloaded.groups.get(group_id)
            if r is None and g.state is S.EMPTY and g.generation_id == 0 and group_id not in live.offsets:
                continue  # created by a JoinGroup whose rebalance has not completed: memory only, as in Kafka
            assert r is not None, group_id
            assert (r.state, r.generation_id, r.protocol_name, r.leader_id) == (
                g.state, g.generation_id, g.protocol_name, g.leader_id), group_id
            assert {m: x.assignment for m, x in r.members.items()} == {m: x.assignment for m, x in g.members.items()}
            assert r.static_members == g.static_members
        assert set(reloaded.groups) - set(live.groups) == set()

    @invariant()
    def answered_at_most_once_and_parked_only_where_allowed(self):
        assert all(len(b.responses) <= 1 for b in self.boxes)
        for g in self.h.shard.groups.values():
            for m in g.members.values():
                if m.is_awaiting_join:
                    assert g.state is S.PREPARING_REBALANCE
                if m.is_awaiting_sync:
                    assert g.state is S.COMPLETING_REBALANCE
            if g.state is S.EMPTY:
                assert not g.members


TestGroupReplay = GroupMachine.TestCase
TestGroupReplay.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
