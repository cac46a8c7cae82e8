"""KRaft metadata snapshots in Kafka's on-disk format (KIP-630).

A snapshot holds the state of the metadata log ``__cluster_metadata-0`` up to, not including, its *end offset*.
It lives in the partition directory as ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``, e.g.
``00000000000000001234-0000000005.checkpoint`` (state of offsets 0..1233; the record at 1233 was written in
leader epoch 5). A snapshot is written as ``<name>.checkpoint.part`` and renamed when complete; deletion renames
it to ``<name>.checkpoint.deleted`` before unlinking. Leftover ``.part`` / ``.deleted`` files are removed when
the directory is opened (:class:`SnapshotStore`).

The file is a sequence of v2 record batches, the format of a log segment, with offsets 0, 1, 2, ... and every
batch's ``partition_leader_epoch`` set to the snapshot epoch::

    control batch  SnapshotHeaderRecord  (control key: int16 version 0, int16 type 3; value: message v0,
                                          with last_contained_log_timestamp)
    data batches   metadata records      (null key; value framed as in kbroker.controller.records)
    control batch  SnapshotFooterRecord  (control key: int16 version 0, int16 type 4; value: message v0)

Kafka may also put KRaftVersion (type 5) and KRaftVoters (type 6) control batches after the header;
:func:`decode_snapshot` skips them.

:func:`image_records` turns a :class:`~kbroker.controller.image.MetadataImage` into the metadata records that
rebuild it; :func:`load_image` replays a snapshot's records into a new image. Nothing here runs asyncio;
:class:`SnapshotStore` does blocking file I/O (fsync) and is not thread-safe.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from kbroker.controller.image import MetadataDelta, MetadataImage, MetadataReplayError
from kbroker.controller.records import MetadataRecordError, decode_metadata_record
from kbroker.protocol import codec
from kbroker.protocol.errors import CorruptRecordError, InvalidRecordError
from kbroker.protocol.messages.snapshot_footer_record import SnapshotFooterRecord
from kbroker.protocol.messages.snapshot_header_record import SnapshotHeaderRecord
from kbroker.protocol.metadata_records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from kbroker.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    ControlType,
    RecordBatch,
    build_batch,
    build_control_batch,
    split_batches_strict,
)
from kbroker.storage.util import DELETED_SUFFIX, fsync_dir

__all__ = [
    "PART_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "SnapshotError",
    "SnapshotStore",
    "decode_snapshot",
    "decode_snapshot_voters",
    "encode_snapshot",
    "image_records",
    "load_image",
    "parse_snapshot_file_name",
    "snapshot_file_name",
]

SNAPSHOT_SUFFIX = ".checkpoint"
"""Suffix of a complete snapshot file."""
PART_SUFFIX = ".part"
"""Appended to :data:`SNAPSHOT_SUFFIX` while a snapshot is being written."""

_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
_MAX_OFFSET = 10**20 - 1
_MAX_EPOCH = 10**10 - 1

#: Control types Kafka may place between the header and the first data batch (KIP-853); skipped when decoding.
_SKIPPED_CONTROL_TYPES = frozenset({ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS})


class SnapshotError(RuntimeError):
    """A snapshot cannot be used: torn, corrupt (CRC), malformed, or its records do not replay."""


# ------------------------------------------------------------------------------------------ file names


def snapshot_file_name(end_offset: int, epoch: int) -> str:
    """``<end_offset:020d>-<epoch:010d>.checkpoint``, the KIP-630 name of a snapshot.

    ``end_offset``: exclusive end of the log the snapshot covers (>= 0). ``epoch``: leader epoch of the record
    at ``end_offset - 1`` (>= 0). Raises ``ValueError`` for negative values or values with too many digits.
    """
    if not 0 <= end_offset <= _MAX_OFFSET or not 0 <= epoch <= _MAX_EPOCH:
        raise ValueError(f"invalid snapshot id: end offset {end_offset}, epoch {epoch}")
    return f"{end_offset:020d}-{epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> tuple[int, int] | None:
    """``(end_offset, epoch)`` of a complete snapshot's file name (a base name, no directory); ``None`` for
    any other name, including ``.checkpoint.part`` / ``.checkpoint.deleted`` files and ``bootstrap.checkpoint``."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


# ------------------------------------------------------------------------------------------ contents


def encode_snapshot(values: Sequence[bytes], epoch: int, last_contained_log_timestamp_ms: int, now_ms: int,
                    voters: Any = None) -> bytes:
    """The bytes of a snapshot file holding ``values`` (encoded metadata records, see
    :func:`kbroker.controller.records.encode_metadata_record`), in order.

    Layout (KIP-630): a SnapshotHeader control batch at offset 0 (``last_contained_log_timestamp`` =
    ``last_contained_log_timestamp_ms``, the append time in ms of the record at end offset - 1), the values in
    data batches from offset 1 (null keys; batches split as the controller splits its writes), then a
    SnapshotFooter control batch. Every batch has ``partition_leader_epoch = epoch`` and the timestamp
    ``now_ms`` (ms since the epoch). With ``voters`` (a :class:`~kbroker.controller.raft.log.VoterSet`: the
    quorum's voters are in its log, KIP-853) a KRaftVersion and a KRaftVoters control batch follow the header.
    Raises ``ValueError`` for a negative ``epoch``.
    """
    # Imported here: the controller is expected to import this module, and the chunking rule is its own.
    from kbroker.controller.quorum_controller import _chunk

    if epoch < 0:
        raise ValueError(f"snapshot epoch must be >= 0, not {epoch}")
    header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_timestamp_ms)
    out = [build_control_batch(ControlType.SNAPSHOT_HEADER, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, 0, now_ms,
                               base_offset=0, partition_leader_epoch=epoch, value=codec.encode(header, 0))]
    offset = 1
    if voters is not None:
        from kbroker.controller.raft.voters_record import kraft_version_batch, voters_batch

        out.append(kraft_version_batch(1, epoch, now_ms))
        out.append(voters_batch(voters, 2, epoch, now_ms))
        offset = 3
    if values:
        for chunk in _chunk([bytes(v) for v in values]):
            out.append(build_batch([(None, v, [], now_ms) for v in chunk], base_offset=offset,
                                   partition_leader_epoch=epoch))
            offset += len(chunk)
    out.append(build_control_batch(ControlType.SNAPSHOT_FOOTER, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, 0, now_ms,
                                   base_offset=offset, partition_leader_epoch=epoch,
                                   value=codec.encode(SnapshotFooterRecord(version=0), 0)))
    return b"".join(out)


def _control(batch: RecordBatch, index: int) -> tuple[int, bytes]:
    """(control type, value) of the single record of a control batch."""
    if batch.records_count != 1:
        raise SnapshotError(f"snapshot batch {index} is a control batch with {batch.records_count} records, not 1")
    try:
        record = batch.control_record()
    except CorruptRecordError as exc:
        raise SnapshotError(f"snapshot batch {index}: {exc}") from None
    if record is None or record[2] is None:
        raise SnapshotError(f"snapshot batch {index} is a control batch without a value")
    return record[0], record[2]


def _check_control_value(cls: type, value: bytes, index: int) -> None:
    try:
        codec.decode(cls, value, 0, 0)
    except codec.DecodeError as exc:
        raise SnapshotError(f"snapshot batch {index}: malformed {cls.__name__}: {exc}") from None


def decode_snapshot_voters(data: bytes) -> Any:
    """The voter set a snapshot carries (a :class:`~kbroker.controller.raft.log.VoterSet`), or None when it names
    none (static voters) or is not in Kafka's format. Only the batches after the header are looked at."""
    from kbroker.controller.raft.voters_record import batch_voters

    try:
        batches = split_batches_strict(data)
    except CorruptRecordError:
        return None
    for batch in batches[1:4]:
        try:
            found = batch_voters(batch)
        except (CorruptRecordError, codec.DecodeError):
            return None
        if found is not None:
            return found
    return None


def decode_snapshot(data: bytes) -> list[bytes]:
    """The record values of a snapshot file's contents (``data``, the whole file), in offset order.

    Checks that ``data`` is whole batches only, that every batch passes its CRC-32C and header checks, that
    offsets start at 0 and are consecutive across batches, that the first batch is a SnapshotHeader control
    batch and the last a SnapshotFooter control batch (exactly one record each), and that no data record has a
    null value. KRaftVersion/KRaftVoters control batches are skipped. The values are not decoded (see
    :func:`load_image`). Raises :class:`SnapshotError` (one-line message) for any violation.
    """
    try:
        batches = split_batches_strict(data)
    except CorruptRecordError as exc:
        raise SnapshotError(f"snapshot is torn: {exc}") from None
    if not batches:
        raise SnapshotError("snapshot is empty (no header)")
    values: list[bytes] = []
    expected = 0
    last = len(batches) - 1
    for i, batch in enumerate(batches):
        try:
            batch.validate_records()  # magic, length, CRC, record count and offset deltas
        except (CorruptRecordError, InvalidRecordError) as exc:
            raise SnapshotError(f"snapshot batch {i} at offset {batch.base_offset} is corrupt: {exc}") from None
        if batch.records_count == 0:
            raise SnapshotError(f"snapshot batch {i} at offset {batch.base_offset} holds no records")
        if batch.base_offset != expected:
            raise SnapshotError(f"snapshot batch {i} starts at offset {batch.base_offset}, expected {expected}")
        expected = batch.next_offset
        if i == 0 or i == last:
            want, cls, what = ((ControlType.SNAPSHOT_HEADER, SnapshotHeaderRecord, "header first") if i == 0
                               else (ControlType.SNAPSHOT_FOOTER, SnapshotFooterRecord, "footer last"))
            if not batch.is_control:
                raise SnapshotError(f"snapshot batch {i} is a data batch: the snapshot lacks its {what}")
            ctype, value = _control(batch, i)
            if ctype != want:
                raise SnapshotError(f"snapshot batch {i} has control type {ctype}, expected {want.name} ({int(want)})")
            _check_control_value(cls, value, i)
            if i == 0 and last == 0:
                raise SnapshotError("snapshot has a header but no footer")
            continue
        if batch.is_control:
            ctype, _ = _control(batch, i)
            if ctype not in _SKIPPED_CONTROL_TYPES:
                raise SnapshotError(f"snapshot batch {i} is an unexpected control batch of type {ctype}")
            continue
        for record in batch.records():
            if record.value is None:
                raise SnapshotError(f"snapshot record at offset {record.offset} has a null value")
            values.append(bytes(record.value))
    return values


# ------------------------------------------------------------------------------------------ images


def _entity_sort_key(entity: tuple[tuple[str, str | None], ...]) -> tuple[tuple[str, bool, str], ...]:
    return tuple((t, n is not None, n or "") for t, n in entity)


def image_records(image: MetadataImage) -> list[Any]:
    """The metadata records that, replayed in order into ``MetadataDelta(MetadataImage.empty(cluster_id))``,
    rebuild ``image`` (every field but ``offset``; ``cluster_id`` is not a record).

    Order: a FeatureLevelRecord per finalized feature (``metadata.version`` first, then by name); a
    RegisterBrokerRecord per broker (by id) carrying its fencing and controlled-shutdown state; per topic (by
    name) a TopicRecord and a PartitionRecord per partition (by id); a ConfigRecord per (resource, key) (sorted);
    a UserScramCredentialRecord per SCRAM credential (by user name, then mechanism code); an
    AccessControlEntryRecord per ACL (by id); a ClientQuotaRecord per client-quota entity and key (by entity, then
    key); a DelegationTokenRecord per delegation token (by id); a ProducerIdsRecord
    (broker id and epoch -1, as the image keeps neither) when ``producer_ids_next > 0``.
    """
    records: list[Any] = []
    names = sorted(image.features, key=lambda n: (n != "metadata.version", n))
    records += [FeatureLevelRecord(name=n, feature_level=image.features[n]) for n in names]
    for node_id, b in sorted(image.brokers.items()):
        records.append(RegisterBrokerRecord(
            broker_id=node_id,
            incarnation_id=b.incarnation_id,
            broker_epoch=b.broker_epoch,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=e.listener, host=e.host, port=e.port,
                                                            security_protocol=e.security_protocol)
                        for e in b.endpoints],
            features=[RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(b.supported_features.items())],
            rack=b.rack,  # type: ignore[arg-type]  # nullable in the spec
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
            log_dirs=list(b.log_dirs),
        ))
    for name, topic in sorted(image.topics_by_name.items()):
        records.append(TopicRecord(name=name, topic_id=topic.topic_id))
        for pid, p in sorted(topic.partitions.items()):
            records.append(PartitionRecord(
                partition_id=pid,
                topic_id=topic.topic_id,
                replicas=list(p.replicas),
                isr=list(p.isr),
                removing_replicas=list(p.removing_replicas),
                adding_replicas=list(p.adding_replicas),
                leader=p.leader,
                leader_recovery_state=p.leader_recovery_state,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                directories=list(p.directories),
                eligible_leader_replicas=list(p.eligible_leader_replicas) or None,
                last_known_elr=list(p.last_known_elr) or None,
            ))
    for (resource_type, resource_name), configs in sorted(image.configs.items()):
        records += [ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=k, value=v)
                    for k, v in sorted(configs.items())]
    records += [UserScramCredentialRecord(name=user, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key,
                                          server_key=c.server_key, iterations=c.iterations)
                for (user, mechanism), c in sorted(image.scram_credentials.items())]
    records += [AccessControlEntryRecord(id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                                         pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                                         operation=a.operation, permission_type=a.permission_type)
                for acl_id, a in sorted(image.acls.items())]
    entity_data = ClientQuotaRecord.EntityData
    records += [ClientQuotaRecord(entity=[entity_data(entity_type=t, entity_name=n) for t, n in entity], key=k, value=v)
                for entity, values in sorted(image.client_quotas.items(), key=lambda kv: _entity_sort_key(kv[0]))
                for k, v in sorted(values.items())]
    records += [DelegationTokenRecord(owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                                      issue_timestamp=t.issue_timestamp, max_timestamp=t.max_timestamp,
                                      expiration_timestamp=t.expiry_timestamp, token_id=token_id)
                for token_id, t in sorted(image.delegation_tokens.items())]
    if image.producer_ids_next > 0:
        records.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.producer_ids_next))
    return records


def load_image(cluster_id: str, values: Iterable[bytes], end_offset: int) -> MetadataImage:
    """The image a snapshot describes: ``values`` (encoded metadata records, e.g. from :func:`decode_snapshot`)
    replayed in order into an empty image of ``cluster_id``, with ``offset = end_offset - 1`` (the last log
    offset the snapshot covers; -1 for ``end_offset`` 0).

    Raises :class:`SnapshotError` when a value does not decode or a record does not replay (the message names its
    position), ``ValueError`` for a negative ``end_offset``.
    """
    if end_offset < 0:
        raise ValueError(f"snapshot end offset must be >= 0, not {end_offset}")
    delta = MetadataDelta(MetadataImage.empty(cluster_id))
    for i, value in enumerate(values):
        try:
            delta.replay(decode_metadata_record(value))
        except (MetadataRecordError, MetadataReplayError) as exc:
            raise SnapshotError(f"snapshot record {i} cannot be loaded: {exc}") from None
    delta.advance_offset(end_offset - 1)
    return delta.apply()


# ------------------------------------------------------------------------------------------ files


class SnapshotStore:
    """The snapshots in one directory (``__cluster_metadata-0``), addressed by ``(end_offset, epoch)``.

    Opening removes the leftovers of interrupted writes and deletions (``<id>.checkpoint.part``,
    ``<id>.checkpoint.deleted``) and creates the directory if needed. Files whose names are not snapshot names
    are ignored. Blocking I/O, not thread-safe. Methods raise ``OSError`` on I/O failures.
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        removed = False
        for name in os.listdir(self.directory):
            for suffix in (PART_SUFFIX, DELETED_SUFFIX):
                if name.endswith(SNAPSHOT_SUFFIX + suffix) and parse_snapshot_file_name(name[: -len(suffix)]):
                    (self.directory / name).unlink(missing_ok=True)
                    removed = True
        if removed:
            fsync_dir(self.directory)

    def path(self, snapshot_id: tuple[int, int]) -> Path:
        """Path of the snapshot ``(end_offset, epoch)`` (whether or not it exists)."""
        return self.directory / snapshot_file_name(*snapshot_id)

    def ids(self) -> list[tuple[int, int]]:
        """Ids ``(end_offset, epoch)`` of the complete snapshots, ascending."""
        found = (parse_snapshot_file_name(name) for name in os.listdir(self.directory))
        return sorted(i for i in found if i is not None)

    def latest(self) -> tuple[int, int] | None:
        """The snapshot with the highest end offset (then epoch), or ``None`` when there is none."""
        ids = self.ids()
        return ids[-1] if ids else None

    def earliest(self) -> tuple[int, int] | None:
        """The snapshot with the lowest end offset (then epoch), or ``None`` when there is none."""
        ids = self.ids()
        return ids[0] if ids else None

    def write(self, end_offset: int, epoch: int, data: bytes) -> tuple[int, int]:
        """Store ``data`` (a whole snapshot file, e.g. from :func:`encode_snapshot`) as snapshot
        ``(end_offset, epoch)`` durably: write ``<name>.part``, flush and fsync it, rename it to ``<name>``, fsync
        the directory. An existing snapshot with the same id is replaced atomically. ``data`` is not checked.
        Returns the id. Raises ``ValueError`` for an invalid id."""
        final = self.directory / snapshot_file_name(end_offset, epoch)
        part = final.with_name(final.name + PART_SUFFIX)
        try:
            with open(part, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, final)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)
        return end_offset, epoch

    def read(self, snapshot_id: tuple[int, int]) -> bytes:
        """The whole file of a snapshot. Raises ``FileNotFoundError`` when it does not exist (any more)."""
        return self.path(snapshot_id).read_bytes()

    def size(self, snapshot_id: tuple[int, int]) -> int:
        """Size of a snapshot file in bytes. Raises ``FileNotFoundError`` when it does not exist."""
        return self.path(snapshot_id).stat().st_size

    def read_chunk(self, snapshot_id: tuple[int, int], position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes of a snapshot file from byte ``position`` (FetchSnapshot's unaligned
        records); ``b""`` at the end of the file. Raises ``FileNotFoundError`` when the snapshot does not exist,
        ``ValueError`` when ``position`` is outside ``0..size`` or ``max_bytes`` is negative."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
        fd = os.open(self.path(snapshot_id), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if not 0 <= position <= size:
                raise ValueError(f"position {position} is outside snapshot {snapshot_id} of {size} bytes")
            return os.pread(fd, min(max_bytes, size - position), position)
        finally:
            os.close(fd)

    def delete_before(self, end_offset: int) -> list[tuple[int, int]]:
        """Delete every snapshot whose end offset is lower than ``end_offset`` (rename to ``.deleted``, then
        unlink). Returns the deleted ids, ascending."""
        deleted = [i for i in self.ids() if i[0] < end_offset]
        for snapshot_id in deleted:
            path = self.path(snapshot_id)
            doomed = path.with_name(path.name + DELETED_SUFFIX)
            os.replace(path, doomed)
            doomed.unlink()
        if deleted:
            fsync_dir(self.directory)
        return deleted
