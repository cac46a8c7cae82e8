"""The voter set on disk and on the wire (KIP-853): :class:`~kbroker.controller.raft.log.VoterSet` to and from
Kafka's ``VotersRecord`` (control type 6, KRaftVoters) and ``KRaftVersionRecord`` (control type 5).

A VotersRecord batch in ``__cluster_metadata`` makes its set the voters from its offset on; a snapshot carries
a KRaftVersion and a VotersRecord control batch right after its header when the quorum's voters are dynamic
(``kraft.version`` 1). Each voter has its node id, the directory id of its metadata log directory, its controller
listeners, and the ``kraft.version`` range it supports (0-1 for kbroker).
"""

from __future__ import annotations

from kbroker.controller.raft.log import Voter, VoterSet
from kbroker.protocol import codec
from kbroker.protocol.messages.k_raft_version_record import KRaftVersionRecord
from kbroker.protocol.messages.voters_record import VotersRecord
from kbroker.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ControlType, RecordBatch, build_control_batch

KRAFT_VERSION = 1
"""The ``kraft.version`` of a quorum whose voters are in the log."""


def to_record(voters: VoterSet) -> VotersRecord:
    return VotersRecord(version=0, voters=[VotersRecord.Voter(
        voter_id=v.node_id, voter_directory_id=v.directory_id,
        endpoints=[VotersRecord.Endpoint(name=n, host=h, port=p) for n, h, p in v.endpoints],
        k_raft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0,
                                                                max_supported_version=KRAFT_VERSION))
        for v in voters.voters])


def from_record(rec: VotersRecord) -> VoterSet:
    return VoterSet.of([Voter(v.voter_id, bytes(v.voter_directory_id),
                              tuple((e.name, e.host, e.port) for e in v.endpoints)) for v in rec.voters])


def encode_voters(voters: VoterSet) -> bytes:
    return codec.encode(to_record(voters), 0)


def decode_voters(value: bytes) -> VoterSet:
    """Raises ``codec.DecodeError`` for a malformed record."""
    rec, _ = codec.decode(VotersRecord, value, 0, 0)
    return from_record(rec)


def voters_batch(voters: VoterSet, offset: int, epoch: int, now_ms: int) -> bytes:
    """A KRaftVoters control batch of one VotersRecord at ``offset``."""
    return build_control_batch(ControlType.KRAFT_VOTERS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, 0, now_ms,
                               base_offset=offset, partition_leader_epoch=epoch, value=encode_voters(voters))


def kraft_version_batch(offset: int, epoch: int, now_ms: int) -> bytes:
    """A KRaftVersion control batch (``kraft.version`` 1) at ``offset``."""
    value = codec.encode(KRaftVersionRecord(version=0, k_raft_version=KRAFT_VERSION), 0)
    return build_control_batch(ControlType.KRAFT_VERSION, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, 0, now_ms,
                               base_offset=offset, partition_leader_epoch=epoch, value=value)


def batch_voters(batch: RecordBatch) -> VoterSet | None:
    """The voter set of a KRaftVoters control batch, else None."""
    if not batch.is_control or batch.records_count != 1:
        return None
    rec = batch.control_record()
    if rec is None or rec[0] != ControlType.KRAFT_VOTERS or rec[2] is None:
        return None
    return decode_voters(bytes(rec[2]))
