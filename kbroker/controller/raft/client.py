"""KRaft's replication protocol as a time-driven state machine with no I/O of its own.

:class:`RaftClient` has the shape of Kafka's ``KafkaRaftClient``: the owner calls :meth:`RaftClient.poll` with
the current time (milliseconds) and gets back when it next needs to run; messages from peers are passed in with
:meth:`RaftClient.handle`; messages to peers are taken from :attr:`RaftClient.outbox` as ``(destination,
message)`` pairs. Time and randomness come from the caller (``now`` and a ``random.Random``), the log and the
election store are objects the caller gives it, so a seeded simulation replays one run exactly
(``kbroker.testing.raft_simulation``).

The protocol (KIP-595, with pre-vote from KIP-996 and check-quorum):

* **Election.** A voter that hears nothing from a leader for ``fetch_timeout_ms`` (or is unattached for its
  randomised election timeout) becomes *prospective* and asks the other voters for pre-votes for epoch + 1;
  voters grant a pre-vote when the asker's log is at least as up to date as theirs and they have not heard from a
  leader within the fetch timeout. A majority makes it a *candidate*: it bumps its epoch, votes for itself
  (persisted before anything is sent) and asks for real votes. A voter grants at most one vote per epoch,
  persisted before it answers. A majority makes the candidate *leader*.
* **Replication.** The new leader appends a LeaderChange control entry in its epoch and sends
  BeginQuorumEpoch to the voters. Followers fetch with their log end offset and last fetched epoch; when that
  position is not in the leader's log, the leader answers with the diverging epoch and its end offset, and the
  follower truncates (never below its high watermark) and fetches again. Observers (brokers) fetch the same way
  but are not counted.
* **Commit.** The high watermark is the largest offset that a majority of voters hold: the leader counts its own
  *flushed* log end offset and each voter's last fetch offset, and the high watermark only moves once the entry
  that opened the leader's epoch is covered (so entries of earlier epochs are committed only through one of
  the current epoch). Followers learn it from fetch responses, capped by their own log end offset.
* **Snapshots** (KIP-630). The owner writes a snapshot of its state at a committed offset
  (:meth:`RaftClient.create_snapshot`) and may then drop the log below it (:meth:`RaftClient.delete_before_snapshot`).
  A replica whose fetch offset is below the leader's log start offset (or whose last fetched epoch ends below it)
  is answered with the leader's latest snapshot id; it fetches the snapshot in chunks with FetchSnapshot,
  replaces its log by it (``install_snapshot``), tells the owner (``on_snapshot``) and fetches on from the
  snapshot's end offset.
* **Voter changes** (KIP-853). The voter set is the one the log names last (a :class:`VoterSet` entry), else the
  static one given at construction. The leader adds a caught-up observer (:meth:`RaftClient.add_voter`) or
  removes a voter (:meth:`RaftClient.remove_voter`) by appending the new set, one change at a time and only once
  it has committed an entry of its own epoch (the single-server change rule of Raft, with the fix for its
  known election bug); every replica uses a set from the moment it is in its log. A leader that removed itself
  leads until the change is committed, then resigns.
* **Leaving.** A leader resigns (graceful shutdown, or a majority has not fetched for 1.5 x fetch timeout:
  check-quorum) and sends EndQuorumEpoch naming its preferred successors, most caught-up first; the first one
  starts its election at once.

States and their legal transitions are in :mod:`kbroker.controller.raft.states`; the durable part (epoch,
leader, vote) is written through the ``ElectionStore`` before any message that depends on it is sent.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Callable, Protocol

from kbroker.controller.raft.log import LogEntry, RaftLog, Voter, VoterSet
from kbroker.controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)
from kbroker.controller.raft.states import ElectionState, QuorumStateName, check_transition

log = logging.getLogger(__name__)

S = QuorumStateName
NO_DEADLINE = 2**62


class ElectionStore(Protocol):
    """Durable home of the :class:`ElectionState` (``quorum-state``); ``write`` must be durable on return."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


class MemoryElectionStore:
    """An :class:`ElectionStore` in memory (always durable), for simulations."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1


@dataclass(frozen=True)
class RaftConfig:
    """Timeouts in milliseconds, Kafka's keys: ``controller.quorum.election.timeout.ms`` (1000),
    ``controller.quorum.fetch.timeout.ms`` (2000), ``controller.quorum.election.backoff.max.ms`` (1000),
    ``controller.quorum.request.timeout.ms`` (2000), ``controller.quorum.retry.backoff.ms`` (20)."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_entries: int = 100
    append_linger_ms: int = 0
    """``controller.quorum.append.linger.ms``: how long the leader may hold appended entries before it flushes
    them (they are readable by followers before, but count for the high watermark only once flushed)."""
    snapshot_chunk_bytes: int = 8 * 1024 * 1024
    """The most bytes of a snapshot asked for in one FetchSnapshot."""


@dataclass
class ReplicaState:
    """What the leader knows of one replica: its log end offset (last fetch offset) and when it last fetched."""

    end_offset: int = -1
    last_fetch_ms: int = -(2**62)
    directory_id: bytes = bytes(16)


class NotLeaderError(RuntimeError):
    """:meth:`RaftClient.append` on a replica that is not the leader (Kafka: ``NOT_CONTROLLER``)."""


class VoterChangeError(RuntimeError):
    """A voter change the leader refuses: ``error`` is the Kafka error name (``NOT_LEADER_OR_FOLLOWER``,
    ``DUPLICATE_VOTER``, ``VOTER_NOT_FOUND``, ``REQUEST_TIMED_OUT`` while another change or the leader's own first
    commit is pending or the new voter has not caught up, ``INVALID_REQUEST`` to remove the last voter)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


class RaftClient:
    """One replica of the metadata log: a voter when ``node_id`` is in ``voters``, otherwise an observer.

    ``on_commit(high_watermark)`` (optional) is called whenever the high watermark moves forward; entries below it
    are committed and may be applied. ``on_snapshot((end_offset, epoch))`` (optional) is called when this replica
    replaced its log by a snapshot fetched from the leader: the owner loads its state from that snapshot (and
    applies entries from its end offset on).
    """

    def __init__(self, node_id: int, voters: frozenset[int] | set[int] | VoterSet, raft_log: RaftLog,
                 store: ElectionStore, rng: random.Random, now: int, config: RaftConfig | None = None,
                 on_commit: Callable[[int], None] | None = None,
                 on_snapshot: Callable[[tuple[int, int]], None] | None = None,
                 bootstrap: tuple[int, ...] = (), directory_id: bytes = bytes(16)) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        """This replica's metadata directory id, sent with its fetches (KIP-853)."""
        self.static_voters = voters if isinstance(voters, VoterSet) else VoterSet.of([Voter(v) for v in voters])
        """The voters until the log names others (``controller.quorum.voters``)."""
        self.bootstrap = bootstrap
        """Where an observer that knows no voter fetches first (``controller.quorum.bootstrap.servers``: ids the
        owner maps to addresses, negative by convention)."""
        self.log = raft_log
        self.store = store
        self.rng = rng
        self.cfg = config or RaftConfig()
        self.on_commit = on_commit
        self.on_snapshot = on_snapshot
        self.snapshots_fetched = 0
        self.outbox: list[tuple[int, RaftMessage]] = []
        self.high_watermark = 0
        self._correlation = 0
        stored = store.read() or ElectionState(voters=tuple(sorted(self.voters)))
        self.epoch = stored.epoch
        self.leader_id = stored.leader_id
        self.voted_id = stored.voted_id
        self._reset_state_fields()
        # Start-up: a former leader comes back resigned; a replica that knew its leader follows it; else unattached.
        if self.leader_id == node_id:
            self.state = S.RESIGNED
            self._election_deadline = now + self._election_timeout()
        elif self.leader_id != -1:
            self.state = S.FOLLOWER
            self._fetch_deadline = now + self.cfg.fetch_timeout_ms
        else:
            self.state = S.UNATTACHED
            self._election_deadline = now + (0 if self.voters == {node_id} else self._election_timeout())

    # ------------------------------------------------------------------ public API
    @property
    def voter_set(self) -> VoterSet:
        """The voters in force: the last set the log names, else the static one."""
        return self.log.voters() or self.static_voters

    @property
    def voters(self) -> frozenset[int]:
        return self.voter_set.ids

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def is_leader(self) -> bool:
        return self.state is S.LEADER

    def election_state(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, tuple(sorted(self.voters)))

    def append(self, records: list[bytes], now: int) -> int:
        """Append records as one batch in the leader's epoch; returns the offset of the last one. They are
        committed together once :attr:`high_watermark` passes that offset. Raises :class:`NotLeaderError`
        elsewhere."""
        if self.state is not S.LEADER:
            raise NotLeaderError(f"node {self.node_id} is {self.state.value} in epoch {self.epoch}")
        if not records:
            raise ValueError("nothing to append")
        self.log.append([LogEntry(self.log.end_offset, self.epoch, tuple(records), len(records))])
        if self._flush_due is None:
            self._flush_due = now + self.cfg.append_linger_ms
        return self.log.end_offset - 1

    def create_snapshot(self, end_offset: int, data: bytes) -> tuple[int, int]:
        """Store the owner's state after every entry below ``end_offset`` as a snapshot -> its id ``(end_offset,
        epoch)``. ``end_offset`` must be committed (at most the high watermark), at a batch boundary and past the
        log start offset. Raises ValueError otherwise."""
        if not self.log.log_start_offset < end_offset <= self.high_watermark:
            raise ValueError(f"snapshot at {end_offset}: not committed past the log start offset "
                             f"(log start {self.log.log_start_offset}, high watermark {self.high_watermark})")
        epoch = self.log.epoch_at(end_offset - 1)
        if end_offset > self.log.flushed_offset:
            self.log.flush()  # a leader's entries are committed once a majority of followers hold them
        self.log.create_snapshot(end_offset, epoch, data)
        return (end_offset, epoch)

    def delete_before_snapshot(self) -> bool:
        """Drop the log below the latest snapshot (and older snapshots); returns whether anything was dropped."""
        latest = self.log.latest_snapshot_id()
        if latest is None or latest[0] > self.high_watermark:
            return False
        return self.log.delete_before_snapshot(latest)

    def add_voter(self, voter: Voter, now: int) -> int:
        """Leader: make ``voter`` (an observer that has caught up) a voter -> the offset of the new voter set in the
        log; the change is done once the high watermark passes it. Raises :class:`VoterChangeError`."""
        self._check_voter_change_allowed()
        if voter.node_id in self.voters:
            raise VoterChangeError("DUPLICATE_VOTER", f"node {voter.node_id} is already a voter")
        r = self._replicas.get(voter.node_id)
        if r is None or now - r.last_fetch_ms >= self.cfg.fetch_timeout_ms or r.end_offset < self.high_watermark:
            raise VoterChangeError("REQUEST_TIMED_OUT", f"node {voter.node_id} has not caught up with the leader "
                                                        f"(it must fetch from the leader up to its high watermark)")
        return self._append_voters(self.voter_set.with_voter(voter), now)

    def remove_voter(self, node_id: int, directory_id: bytes | None, now: int) -> int:
        """Leader: remove voter ``node_id`` (with ``directory_id``, when given, as recorded) -> the offset of the new
        voter set; a leader that removes itself resigns once that is committed. Raises :class:`VoterChangeError`."""
        self._check_voter_change_allowed()
        current = self.voter_set.get(node_id)
        if current is None or (directory_id is not None and current.directory_id != directory_id
                               and any(current.directory_id)):
            raise VoterChangeError("VOTER_NOT_FOUND", f"node {node_id} is not a voter")
        if len(self.voters) == 1:
            raise VoterChangeError("INVALID_REQUEST", "the last voter cannot be removed")
        if node_id == self.node_id and len(self.voters) == 2:
            # if this leader failed before the other voter fetched the change, that voter (still counting this
            # one) could never be elected: this replica, ahead of it, would refuse its vote and not campaign
            raise VoterChangeError("INVALID_REQUEST", "the leader of a quorum of two cannot remove itself: remove "
                                                      "the other voter, or move the leadership first")
        return self._append_voters(self.voter_set.without(node_id), now)

    def update_voter(self, voter: Voter, now: int) -> int:
        """Leader: a voter's new endpoints (UpdateRaftVoter: it restarted with other listeners) -> the offset of the
        new voter set, or -1 when nothing changes. The voter's directory id must be the recorded one. Raises
        :class:`VoterChangeError`."""
        current = self.voter_set.get(voter.node_id)
        if current is None or (any(current.directory_id) and current.directory_id != voter.directory_id):
            raise VoterChangeError("VOTER_NOT_FOUND", f"node {voter.node_id} is not a voter (with this directory id)")
        if current.endpoints == voter.endpoints and self.state is S.LEADER:
            return -1
        self._check_voter_change_allowed()
        return self._append_voters(self.voter_set.with_voter(Voter(voter.node_id, current.directory_id,
                                                                   voter.endpoints)), now)

    def _check_voter_change_allowed(self) -> None:
        if self.state is not S.LEADER:
            raise VoterChangeError("NOT_LEADER_OR_FOLLOWER", f"node {self.node_id} is not the leader")
        if self.high_watermark <= self._epoch_start_offset:
            raise VoterChangeError("REQUEST_TIMED_OUT", "the leader has not committed an entry of its epoch yet")
        if self.log.last_voters_offset() >= self.high_watermark:
            raise VoterChangeError("REQUEST_TIMED_OUT", "another voter change is not committed yet")

    def _append_voters(self, new: VoterSet, now: int) -> int:
        old = sorted(self.voters)
        offset = self.log.end_offset
        self.log.append([LogEntry(offset, self.epoch, new)])
        # durable before any follower can fetch it: a follower that was removed (and no longer campaigns) must
        # never be the only one left holding the change, ahead of the voters that would have to elect a leader
        self.log.flush()
        log.info("node %s: voters %s -> %s at offset %s", self.node_id, old, sorted(new.ids), offset)
        return offset

    def resign(self, now: int) -> None:
        """Give up leadership gracefully (shutdown): EndQuorumEpoch to the voters, most caught-up first."""
        if self.state is S.LEADER:
            self._become_resigned(now)

    def peer_gone(self, peer: int, now: int) -> None:
        """The owner's connection to ``peer`` was refused or closed by the other end (its process is gone, as
        after kill -9), as opposed to a timeout. When ``peer`` is this replica's leader, it stops counting as
        heard from (so this voter grants pre-votes) and the fetch deadline is brought forward to a random point
        within a quarter of the election timeout, so the election starts without waiting out the fetch timeout.
        Safe as pre-vote is: a prospective needs a majority of voters that lost the leader too; a voter that
        still hears from the leader refuses. (Kafka waits for ``controller.quorum.fetch.timeout.ms``.)"""
        if self.state is not S.FOLLOWER or self.leader_id != peer:
            return
        self._leader_contact_ms = -(2**62)
        delay = self.rng.randint(0, max(1, self.cfg.election_timeout_ms // 4)) if self.is_voter else 0
        self._fetch_deadline = min(self._fetch_deadline, now + delay)

    def poll(self, now: int) -> int:
        """Do what is due at ``now``; returns the time at which this replica next needs to be polled."""
        if self.state is S.LEADER:
            return self._poll_leader(now)
        if self.state is S.FOLLOWER:
            return self._poll_follower(now)
        if self.state is S.UNATTACHED:
            if self.is_voter:
                if now >= self._election_deadline:
                    self._become_prospective(now)
                    return self.poll(now)
                return self._election_deadline
            return self._poll_observer_without_leader(now)
        if self.state in (S.PROSPECTIVE, S.CANDIDATE, S.RESIGNED) and not self.is_voter:
            # removed from the voters (a truncation, or a change this replica made as leader): an observer now
            self._transition(S.UNATTACHED, self.epoch, -1, self.voted_id, now)
            return self.poll(now)
        if self.state in (S.PROSPECTIVE, S.CANDIDATE):
            if now >= self._election_deadline:
                if self.state is S.PROSPECTIVE:  # the pre-vote round ran out: back off, try again later
                    self._transition(S.UNATTACHED, self.epoch, -1, self.voted_id, now)
                    self._election_deadline = now + self._backoff()
                else:
                    self._become_prospective(now)
                return self.poll(now)
            return self._election_deadline
        if self.state is S.RESIGNED:
            if now >= self._election_deadline:
                self._become_prospective(now)
                return self.poll(now)
            return self._election_deadline
        raise AssertionError(self.state)

    def handle(self, msg: RaftMessage, now: int) -> None:
        """Take one message from a peer (request or response)."""
        if isinstance(msg, FetchRequest):
            self._handle_fetch_request(msg, now)
        elif isinstance(msg, FetchResponse):
            self._handle_fetch_response(msg, now)
        elif isinstance(msg, VoteRequest):
            self._handle_vote_request(msg, now)
        elif isinstance(msg, VoteResponse):
            self._handle_vote_response(msg, now)
        elif isinstance(msg, BeginQuorumEpochRequest):
            self._handle_begin_epoch(msg, now)
        elif isinstance(msg, BeginQuorumEpochResponse):
            if msg.epoch > self.epoch:
                self._observe(msg.epoch, msg.leader_id, now)
            elif self.state is S.LEADER and msg.epoch == self.epoch:
                self._begin_pending.discard(msg.src)
        elif isinstance(msg, EndQuorumEpochRequest):
            self._handle_end_epoch(msg, now)
        elif isinstance(msg, FetchSnapshotRequest):
            self._handle_fetch_snapshot_request(msg, now)
        elif isinstance(msg, FetchSnapshotResponse):
            self._handle_fetch_snapshot_response(msg, now)
        else:
            raise TypeError(f"not a Raft message: {msg!r}")

    # ------------------------------------------------------------------ state changes
    def _reset_state_fields(self) -> None:
        self._election_deadline = NO_DEADLINE
        self._fetch_deadline = NO_DEADLINE
        self._fetch_inflight_until = -1
        self._fetch_inflight_id = -1
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._replicas: dict[int, ReplicaState] = {}
        self._epoch_start_offset = 0
        self._begin_pending: set[int] = set()
        self._begin_next_ms = 0
        self._begin_sent: dict[int, int] = {}  # leader: voter -> when BeginQuorumEpoch last went to it
        self._leader_since = 0
        self._flush_due: int | None = None
        self._snapshot_fetch: tuple[tuple[int, int], bytearray] | None = None  # follower: snapshot being fetched
        self._leader_contact_ms = -(2**62)  # last time the leader itself answered or wrote to us

    def _transition(self, dst: QuorumStateName, epoch: int, leader_id: int, voted_id: int, now: int) -> None:
        check_transition(self.state, dst)
        if epoch < self.epoch:
            raise AssertionError(f"epoch went back from {self.epoch} to {epoch}")
        new = ElectionState(epoch, leader_id, voted_id, tuple(sorted(self.voters)))
        if new != self.election_state():
            self.store.write(new)  # durable before any message that depends on it leaves
        log.debug("node %s: %s(epoch %s) -> %s(epoch %s, leader %s, voted %s)", self.node_id, self.state.value,
                  self.epoch, dst.value, epoch, leader_id, voted_id)
        self.state, self.epoch, self.leader_id, self.voted_id = dst, epoch, leader_id, voted_id
        self._reset_state_fields()

    def _observe(self, epoch: int, leader_id: int, now: int) -> None:
        """A peer showed a higher epoch, or named the leader of ours: follow that leader or wait unattached."""
        if epoch < self.epoch:
            return
        if leader_id == self.node_id:
            return  # a stale echo of our own leadership
        if epoch > self.epoch:
            if leader_id != -1:
                self._become_follower(epoch, leader_id, now)
            else:
                self._transition(S.UNATTACHED, epoch, -1, -1, now)
                self._election_deadline = now + self._election_timeout()
            return
        # same epoch
        if leader_id != -1 and self.state is not S.FOLLOWER and self.leader_id in (-1, self.node_id):
            if self.state is S.LEADER:
                raise AssertionError(f"two leaders in epoch {epoch}: {self.node_id} and {leader_id}")
            if self.state is S.RESIGNED:
                return
            self._become_follower(epoch, leader_id, now)

    def _become_follower(self, epoch: int, leader_id: int, now: int) -> None:
        voted = self.voted_id if epoch == self.epoch else -1
        self._transition(S.FOLLOWER, epoch, leader_id, voted, now)
        self._fetch_deadline = now + self.cfg.fetch_timeout_ms

    def _become_prospective(self, now: int) -> None:
        self._transition(S.PROSPECTIVE, self.epoch, -1, self.voted_id, now)
        self._granted = {self.node_id}
        self._election_deadline = now + self._election_timeout()
        req = VoteRequest(self.node_id, self.epoch + 1, self.log.last_epoch, self.log.end_offset, pre_vote=True)
        for v in sorted(self.voters - {self.node_id}):
            self.outbox.append((v, req))
        self._check_election(now)

    def _become_candidate(self, now: int) -> None:
        self._transition(S.CANDIDATE, self.epoch + 1, -1, self.node_id, now)
        self._granted = {self.node_id}
        self._election_deadline = now + self._election_timeout()
        req = VoteRequest(self.node_id, self.epoch, self.log.last_epoch, self.log.end_offset, pre_vote=False)
        for v in sorted(self.voters - {self.node_id}):
            self.outbox.append((v, req))
        self._check_election(now)

    def _become_leader(self, now: int) -> None:
        self._transition(S.LEADER, self.epoch, self.node_id, self.voted_id, now)
        self._epoch_start_offset = self.log.end_offset
        self.log.append([LogEntry(self._epoch_start_offset, self.epoch, None)])  # LeaderChange control record
        self._flush_due = now
        self._replicas = {v: ReplicaState() for v in self.voters if v != self.node_id}
        self._begin_pending = set(self.voters - {self.node_id})
        self._begin_next_ms = now
        self._leader_since = now
        log.info("node %s is the leader in epoch %s (log end offset %s)", self.node_id, self.epoch,
                 self.log.end_offset)

    def _become_resigned(self, now: int) -> None:
        by_offset = sorted(((r.end_offset, v) for v, r in self._replicas.items() if v in self.voters), reverse=True)
        self._transition(S.RESIGNED, self.epoch, self.node_id, self.voted_id, now)
        self._election_deadline = now + self._election_timeout()
        req = EndQuorumEpochRequest(self.node_id, self.epoch, tuple(v for _, v in by_offset))
        for v in sorted(self.voters - {self.node_id}):
            self.outbox.append((v, req))

    def _check_election(self, now: int) -> None:
        majority = len(self.voters) // 2 + 1
        if len(self._granted & self.voters) >= majority:
            if self.state is S.PROSPECTIVE:
                self._become_candidate(now)
            elif self.state is S.CANDIDATE:
                self._become_leader(now)
        elif len(self._rejected & self.voters) >= majority and self.state is S.PROSPECTIVE:
            self._transition(S.UNATTACHED, self.epoch, -1, self.voted_id, now)
            self._election_deadline = now + self._backoff()

    # ------------------------------------------------------------------ polling per state
    def _poll_leader(self, now: int) -> int:
        if self._flush_due is not None and now >= self._flush_due:
            self.log.flush()
            self._flush_due = None
        self._maybe_advance_high_watermark()
        # check-quorum: resign when a majority (counting ourselves) has not fetched for 1.5 x fetch timeout
        window = self.cfg.fetch_timeout_ms * 3 // 2
        if not self.is_voter and self.high_watermark > self.log.last_voters_offset():
            log.info("node %s resigns epoch %s: it is no longer a voter", self.node_id, self.epoch)
            self._become_resigned(now)
            return self.poll(now)
        if len(self.voters) > 1 and now - self._leader_since >= window:
            alive = int(self.is_voter) + sum(1 for v, r in self._replicas.items()
                                             if v in self.voters and now - r.last_fetch_ms < window)
            if alive < len(self.voters) // 2 + 1:
                log.info("node %s resigns epoch %s: only %s of %s voters fetched within %s ms", self.node_id,
                         self.epoch, alive, len(self.voters), window)
                self._become_resigned(now)
                return self.poll(now)
        # a voter that has not fetched for half the fetch timeout hears BeginQuorumEpoch again: one that moved to a
        # higher epoch without winning it (its votes were lost) answers with that epoch, and this leader steps down
        # so that an election can bring it back, instead of the voter pre-voting in vain forever
        quiet = self.cfg.fetch_timeout_ms // 2
        if now - self._leader_since >= quiet:
            for v, r in self._replicas.items():
                if (v in self.voters and now - r.last_fetch_ms >= quiet and v not in self._begin_pending
                        and now - self._begin_sent.get(v, -(2**62)) >= quiet):
                    self._begin_pending.add(v)
        if self._begin_pending and now >= self._begin_next_ms:
            for v in sorted(self._begin_pending):
                self.outbox.append((v, BeginQuorumEpochRequest(self.node_id, self.epoch)))
                self._begin_sent[v] = now
            self._begin_next_ms = now + max(self.cfg.retry_backoff_ms, self.cfg.election_timeout_ms // 4)
        nxt = now + window // 3
        if self._flush_due is not None:
            nxt = min(nxt, self._flush_due)
        if self._begin_pending:
            nxt = min(nxt, self._begin_next_ms)
        return nxt

    def _poll_follower(self, now: int) -> int:
        if now >= self._fetch_deadline:
            if self.is_voter:
                self._become_prospective(now)
            else:
                self._transition(S.UNATTACHED, self.epoch, -1, -1, now)
            return self.poll(now)
        if now >= self._fetch_inflight_until:
            self._send_fetch(self.leader_id, now)
        return min(self._fetch_deadline, self._fetch_inflight_until)

    def _poll_observer_without_leader(self, now: int) -> int:
        targets = sorted(self.voters - {self.node_id}) or list(self.bootstrap)
        if now >= self._fetch_inflight_until and targets:
            self._send_fetch(self.rng.choice(targets), now)
        return self._fetch_inflight_until if targets else now + self.cfg.retry_backoff_ms * 10

    def _send_fetch(self, dst: int, now: int) -> None:
        self._correlation += 1
        self._fetch_inflight_id = self._correlation
        if self._snapshot_fetch is not None:
            (end, epoch), got = self._snapshot_fetch
            self.outbox.append((dst, FetchSnapshotRequest(self.node_id, self.epoch, end, epoch, len(got),
                                                          self.cfg.snapshot_chunk_bytes, self._correlation)))
        else:
            self.outbox.append((dst, FetchRequest(self.node_id, self.epoch, self.log.end_offset,
                                                  self.log.last_epoch, self.cfg.fetch_max_entries,
                                                  self._correlation, self.directory_id, self.high_watermark)))
        self._fetch_inflight_until = now + self.cfg.request_timeout_ms

    # ------------------------------------------------------------------ handlers
    def _log_is_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        return (last_epoch, end_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _handle_vote_request(self, req: VoteRequest, now: int) -> None:
        def answer(granted: bool) -> None:
            # name the leader only when it is alive as far as this replica knows first-hand: a stale name would
            # send the asker back to a leader that has resigned
            alive = self.state is S.LEADER or (
                self.state is S.FOLLOWER and now - self._leader_contact_ms < self.cfg.fetch_timeout_ms)
            self.outbox.append((req.src, VoteResponse(self.node_id, self.epoch, self.leader_id if alive else -1,
                                                      granted, req.candidate_epoch, req.pre_vote)))

        # a replica votes whether or not its own log counts it or the candidate as voters (the candidate's log may
        # hold a newer voter set, KIP-853, and counts only its own set's votes). A replica that hears from a live
        # leader refuses real votes too, not only pre-votes (KIP-996): a candidate that passed its pre-vote never
        # needs such a replica, and a stranger's request cannot depose a working leader or move its epoch
        heard = self.state is S.LEADER or (
            self.state is S.FOLLOWER and now - self._leader_contact_ms < self.cfg.fetch_timeout_ms)
        if heard and not req.pre_vote:
            answer(False)
            return

        if req.pre_vote:
            if req.candidate_epoch <= self.epoch:
                answer(False)
                return
            # only first-hand contact counts: a replica that re-joined a leader on a peer's word has not heard from it
            heard_from_leader = (self.state is S.LEADER or (
                self.state is S.FOLLOWER and now - self._leader_contact_ms < self.cfg.fetch_timeout_ms))
            answer(not heard_from_leader and self._log_is_up_to_date(req.last_offset_epoch, req.last_offset))
            return
        if req.candidate_epoch < self.epoch:
            answer(False)
            return
        if req.candidate_epoch > self.epoch:
            self._transition(S.UNATTACHED, req.candidate_epoch, -1, -1, now)
            self._election_deadline = now + self._election_timeout()
        granted = False
        if self.state in (S.UNATTACHED, S.PROSPECTIVE) and self.voted_id in (-1, req.src) \
                and self._log_is_up_to_date(req.last_offset_epoch, req.last_offset):
            granted = True
            if self.voted_id != req.src or self.state is S.PROSPECTIVE:
                self._transition(S.UNATTACHED, self.epoch, -1, req.src, now)
            self._election_deadline = now + self._election_timeout()
        answer(granted)

    def _handle_vote_response(self, resp: VoteResponse, now: int) -> None:
        if resp.epoch > self.epoch:
            self._observe(resp.epoch, resp.leader_id, now)
            return
        if resp.pre_vote:
            if self.state is not S.PROSPECTIVE or resp.candidate_epoch != self.epoch + 1:
                return
            if resp.leader_id != -1 and resp.epoch == self.epoch:
                self._observe(resp.epoch, resp.leader_id, now)
                return
        elif self.state is not S.CANDIDATE or resp.candidate_epoch != self.epoch:
            return
        (self._granted if resp.vote_granted else self._rejected).add(resp.src)
        self._check_election(now)

    def _handle_begin_epoch(self, req: BeginQuorumEpochRequest, now: int) -> None:
        if req.epoch >= self.epoch and not (self.state is S.LEADER and req.epoch == self.epoch):
            if req.epoch > self.epoch or self.state is not S.FOLLOWER:
                self._observe(req.epoch, req.src, now)
            elif self.leader_id == req.src:
                self._fetch_deadline = now + self.cfg.fetch_timeout_ms
            if self.state is S.FOLLOWER and self.leader_id == req.src:
                self._leader_contact_ms = now
        error = "NONE" if req.epoch >= self.epoch else "FENCED_LEADER_EPOCH"
        self.outbox.append((req.src, BeginQuorumEpochResponse(self.node_id, self.epoch, self.leader_id, error)))

    def _handle_end_epoch(self, req: EndQuorumEpochRequest, now: int) -> None:
        if req.epoch < self.epoch:
            return
        if req.epoch > self.epoch:
            self._observe(req.epoch, -1, now)
        if not self.is_voter:
            return
        if self.state is S.FOLLOWER and self.leader_id == req.src:
            self._leader_contact_ms = -(2**62)  # the leader left: grant pre-votes to its successors at once
            rank = req.preferred_successors.index(self.node_id) if self.node_id in req.preferred_successors \
                else len(self.voters)
            delay = 0 if rank == 0 else self.rng.randint(1, self.cfg.election_backoff_max_ms) * rank // max(1, len(self.voters))
            self._fetch_deadline = now + delay
        elif self.state is S.UNATTACHED:
            self._election_deadline = min(self._election_deadline, now + self._backoff())

    def _handle_fetch_request(self, req: FetchRequest, now: int) -> None:
        def answer(error: str, **kw: object) -> None:
            self.outbox.append((req.src, FetchResponse(self.node_id, self.epoch, self.leader_id, error,
                                                       req.fetch_offset, correlation_id=req.correlation_id,
                                                       **kw)))  # type: ignore[arg-type]

        error = self._fetch_epoch_error(req.epoch)
        if error:
            answer(error)
            return
        start = self.log.log_start_offset
        if start > 0 and req.fetch_offset < start:
            self._answer_with_snapshot(req, answer, now)
            return
        if req.fetch_offset > 0 or req.last_fetched_epoch > 0:
            epoch, end = self.log.end_offset_for_epoch(req.last_fetched_epoch)
            if epoch < 0:  # the fetcher's last epoch ends below our log start: only a snapshot can help
                self._answer_with_snapshot(req, answer, now)
                return
            if epoch != req.last_fetched_epoch or req.fetch_offset > end:
                answer("NONE", high_watermark=self.high_watermark, diverging_epoch=epoch, diverging_end_offset=end)
                return
        replica = self._replica(req.src)
        replica.end_offset = max(replica.end_offset, req.fetch_offset)
        replica.last_fetch_ms = now
        replica.directory_id = req.directory_id
        self._begin_pending.discard(req.src)
        self._maybe_advance_high_watermark()
        entries = tuple(self.log.read(req.fetch_offset, req.max_entries))
        answer("NONE", high_watermark=self.high_watermark, entries=entries)

    def _fetch_epoch_error(self, epoch: int) -> str:
        """Why a Fetch / FetchSnapshot in ``epoch`` is refused here ("" when this replica leads that epoch)."""
        if self.state is not S.LEADER:
            return "NOT_LEADER_OR_FOLLOWER"
        if epoch < self.epoch:
            return "FENCED_LEADER_EPOCH"
        if epoch > self.epoch:
            return "UNKNOWN_LEADER_EPOCH"
        return ""

    def _replica(self, node_id: int) -> ReplicaState:
        """What this leader knows of ``node_id`` (a voter, or an observer from its first fetch on)."""
        replica = self._replicas.get(node_id)
        if replica is None:
            replica = self._replicas[node_id] = ReplicaState()
        return replica

    def _answer_with_snapshot(self, req: FetchRequest, answer: Callable[..., None], now: int) -> None:
        snap = self.log.latest_snapshot_id()
        if snap is None or snap[0] < self.log.log_start_offset:  # cannot happen: the log starts at a snapshot
            raise AssertionError(f"node {self.node_id}: log starts at {self.log.log_start_offset} without a snapshot")
        replica = self._replica(req.src)
        replica.last_fetch_ms = now
        answer("NONE", high_watermark=self.high_watermark, snapshot_end_offset=snap[0], snapshot_epoch=snap[1])

    def _handle_fetch_snapshot_request(self, req: FetchSnapshotRequest, now: int) -> None:
        def answer(error: str, **kw: object) -> None:
            self.outbox.append((req.src, FetchSnapshotResponse(
                self.node_id, self.epoch, self.leader_id, error, req.snapshot_end_offset, req.snapshot_epoch,
                correlation_id=req.correlation_id, **kw)))  # type: ignore[arg-type]

        error = self._fetch_epoch_error(req.epoch)
        if error:
            answer(error)
            return
        snap = (req.snapshot_end_offset, req.snapshot_epoch)
        size = self.log.snapshot_size(snap)
        if size is None:
            answer("SNAPSHOT_NOT_FOUND")
            return
        if not 0 <= req.position <= size:
            answer("POSITION_OUT_OF_RANGE")
            return
        replica = self._replica(req.src)
        replica.last_fetch_ms = now  # a voter fetching a snapshot is alive (check-quorum)
        data = self.log.read_snapshot(snap, req.position, max(1, req.max_bytes))
        answer("NONE", size=size, position=req.position, data=data)

    def _handle_fetch_snapshot_response(self, resp: FetchSnapshotResponse, now: int) -> None:
        if resp.correlation_id != self._fetch_inflight_id:
            return
        self._fetch_inflight_id = -1
        if resp.epoch > self.epoch or (resp.epoch == self.epoch and resp.leader_id not in (-1, self.leader_id)):
            self._observe(resp.epoch, resp.leader_id, now)
        if self.state is not S.FOLLOWER or resp.src != self.leader_id or resp.epoch != self.epoch \
                or self._snapshot_fetch is None:
            return
        snap, got = self._snapshot_fetch
        if resp.error in ("SNAPSHOT_NOT_FOUND", "POSITION_OUT_OF_RANGE") or (
                resp.error == "NONE" and ((resp.snapshot_end_offset, resp.snapshot_epoch) != snap
                                          or resp.position != len(got))):
            self._snapshot_fetch = None  # the leader moved on (a newer snapshot): fetch again to learn which
            self._fetch_inflight_until = now
            return
        if resp.error != "NONE":
            if resp.error == "NOT_LEADER_OR_FOLLOWER":
                self._fetch_deadline = now
                self._leader_contact_ms = -(2**62)
            self._fetch_inflight_until = min(self._fetch_inflight_until, now + self.cfg.retry_backoff_ms)
            return
        self._fetch_inflight_until = now
        self._fetch_deadline = now + self.cfg.fetch_timeout_ms
        self._leader_contact_ms = now
        got += resp.data
        if len(got) > resp.size or (not resp.data and len(got) < resp.size):
            self._snapshot_fetch = None
            return
        if len(got) == resp.size:
            self._snapshot_fetch = None
            if snap[0] < self.high_watermark:
                raise AssertionError(f"node {self.node_id}: snapshot {snap} is below the high watermark "
                                     f"{self.high_watermark}")
            self.log.install_snapshot(snap, bytes(got))
            self.snapshots_fetched += 1
            log.info("node %s installed snapshot %s fetched from the leader %s", self.node_id, snap, resp.src)
            if self.on_snapshot:
                self.on_snapshot(snap)

    def _handle_fetch_response(self, resp: FetchResponse, now: int) -> None:
        if resp.correlation_id != self._fetch_inflight_id:
            return  # a late or duplicated answer to an earlier fetch
        self._fetch_inflight_id = -1
        if resp.epoch > self.epoch or (resp.epoch == self.epoch and resp.leader_id not in (-1, self.leader_id)):
            self._observe(resp.epoch, resp.leader_id, now)
        if resp.error != "NONE":
            if (resp.error == "NOT_LEADER_OR_FOLLOWER" and self.state is S.FOLLOWER and resp.src == self.leader_id
                    and resp.epoch == self.epoch):
                self._fetch_deadline = now  # our leader gave up its epoch: no need to wait for the timeout
                self._leader_contact_ms = -(2**62)
            if self.state in (S.FOLLOWER, S.UNATTACHED):
                self._fetch_inflight_until = min(self._fetch_inflight_until, now + self.cfg.retry_backoff_ms)
            return
        if self.state is not S.FOLLOWER or resp.src != self.leader_id or resp.epoch != self.epoch:
            return
        self._fetch_inflight_until = now  # fetch again at once
        self._fetch_deadline = now + self.cfg.fetch_timeout_ms
        self._leader_contact_ms = now
        if resp.snapshot_end_offset >= 0:
            snap = (resp.snapshot_end_offset, resp.snapshot_epoch)
            if snap[0] < self.high_watermark:
                raise AssertionError(f"node {self.node_id}: the leader sends snapshot {snap} below the high "
                                     f"watermark {self.high_watermark}")
            self._snapshot_fetch = (snap, bytearray())
            return
        if resp.diverging_epoch >= 0:
            _, own_end = self.log.end_offset_for_epoch(resp.diverging_epoch)
            truncate_to = min(own_end, resp.diverging_end_offset)
            if truncate_to < self.high_watermark:
                raise AssertionError(f"node {self.node_id}: truncation to {truncate_to} below the high watermark "
                                     f"{self.high_watermark}")
            self.log.truncate_to(truncate_to)
            return
        if resp.entries:
            self.log.append(resp.entries)
            self.log.flush()
        hw = min(resp.high_watermark, self.log.end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            if self.on_commit:
                self.on_commit(hw)

    # ------------------------------------------------------------------ commit
    def _maybe_advance_high_watermark(self) -> None:
        offsets = sorted((self.log.flushed_offset if v == self.node_id else
                          self._replicas[v].end_offset if v in self._replicas else -1
                          for v in self.voters), reverse=True)
        majority_offset = offsets[len(offsets) // 2]
        if majority_offset > self._epoch_start_offset and majority_offset > self.high_watermark:
            self.high_watermark = majority_offset
            if self.on_commit:
                self.on_commit(majority_offset)

    # ------------------------------------------------------------------ timers
    def _election_timeout(self) -> int:
        base = self.cfg.election_timeout_ms
        return base + self.rng.randint(0, base)

    def _backoff(self) -> int:
        return self.rng.randint(self.cfg.retry_backoff_ms, max(self.cfg.retry_backoff_ms, self.cfg.election_backoff_max_ms))
