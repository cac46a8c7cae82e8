"""Bootstrap metadata: the records the first active controller of a new cluster commits, as Kafka's
``BootstrapMetadata`` / ``BootstrapDirectory``.

They are the finalized feature levels kbroker bootstraps (``BOOTSTRAP_FEATURES`` of
:mod:`kbroker.controller.quorum_controller`) and, when ``kbroker-storage format --add-scram`` wrote them, SCRAM
credentials (``UserScramCredentialRecord``, KIP-554). Those are kept in ``bootstrap.checkpoint`` in the metadata
log directory (``metadata.log.dir``), Kafka's file name and format: a snapshot file (SnapshotHeader control batch,
the records, SnapshotFooter; :func:`kbroker.controller.snapshot.encode_snapshot`) holding the feature levels first,
then the credentials. The file is read when the metadata log is still empty (a quorum of one at its first start,
or the first active controller of a cluster), so each controller of a new cluster should be formatted with the
same ``--add-scram`` flags, as in Kafka. Feature levels always come from kbroker (``format`` accepts only those).
Blocking file I/O.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from kbroker.controller.records import MetadataRecordError, decode_metadata_record, encode_metadata_record
from kbroker.controller.snapshot import SnapshotError, decode_snapshot, encode_snapshot
from kbroker.protocol.metadata_records import FeatureLevelRecord, UserScramCredentialRecord

__all__ = ["BOOTSTRAP_FILE", "BootstrapError", "bootstrap_records", "read_bootstrap_file", "write_bootstrap_file"]

BOOTSTRAP_FILE = "bootstrap.checkpoint"
"""File name of the bootstrap metadata in the metadata log directory (Kafka's ``BootstrapDirectory``)."""

#: Record types a bootstrap file may carry besides the feature levels
_BOOTSTRAPPED_TYPES = (UserScramCredentialRecord,)


class BootstrapError(RuntimeError):
    """``bootstrap.checkpoint`` cannot be used (damaged, or holds records kbroker does not bootstrap)."""


def write_bootstrap_file(metadata_dir: Path | str, features: Mapping[str, int], records: Sequence[Any]) -> Path:
    """Write ``<metadata_dir>/bootstrap.checkpoint``: a FeatureLevelRecord per feature (``metadata.version``
    first), then ``records`` (UserScramCredentialRecords), durably (write, fsync, rename). Returns the path.
    Raises ``OSError``."""
    names = sorted(features, key=lambda n: (n != "metadata.version", n))
    values = [encode_metadata_record(FeatureLevelRecord(name=n, feature_level=features[n])) for n in names]
    values += [encode_metadata_record(r) for r in records]
    now = int(time.time() * 1000)
    path = Path(metadata_dir) / BOOTSTRAP_FILE
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(values, 0, now, now))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_bootstrap_file(metadata_dir: Path | str) -> list[Any] | None:
    """The records of ``<metadata_dir>/bootstrap.checkpoint`` in file order, or None when there is no such file.
    Raises :class:`BootstrapError` (one line) when it is damaged or holds a record type other than
    FeatureLevelRecord and UserScramCredentialRecord."""
    path = Path(metadata_dir) / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BootstrapError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        records = [decode_metadata_record(v) for v in decode_snapshot(data)]
    except (SnapshotError, MetadataRecordError) as exc:
        raise BootstrapError(f"{path} is damaged ({exc}): format the node again or remove the file") from None
    for r in records:
        if not isinstance(r, (FeatureLevelRecord, *_BOOTSTRAPPED_TYPES)):
            raise BootstrapError(f"{path} holds a {type(r).__name__}, which kbroker does not bootstrap")
    return records


def bootstrap_records(metadata_dir: Path | str, features: Mapping[str, int]) -> list[Any]:
    """What a new cluster's first active controller commits: a FeatureLevelRecord per entry of ``features``, then
    the other records of ``bootstrap.checkpoint`` (the SCRAM credentials of ``format --add-scram``) when the file
    exists. Raises :class:`BootstrapError`."""
    out: list[Any] = [FeatureLevelRecord(name=n, feature_level=lvl) for n, lvl in features.items()]
    out += [r for r in read_bootstrap_file(metadata_dir) or () if not isinstance(r, FeatureLevelRecord)]
    return out
