"""A write that fails half-way (file size limit: EFBIG after a short write, as ENOSPC would) leaves no partial
batch in the segment, takes the log directory offline (KAFKA_STORAGE_ERROR from then on) and loses nothing
that was appended before; reopening the log finds exactly the appended batches. Runs in a child process,
whose RLIMIT_FSIZE is lowered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import os, resource, signal, sys
    from pathlib import Path
    from kbroker.protocol.errors import ErrorCode, KafkaError
    from kbroker.protocol.records import build_batch
    from kbroker.storage.config import LogConfig
    from kbroker.storage.log import PartitionLog
    from kbroker.storage.log_dir_failure import LogDirFailureChannel

    root = Path(sys.argv[1])
    channel = LogDirFailureChannel()
    log = PartitionLog(root / "t-0", LogConfig(), failure_channel=channel)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = 200_000
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    appended = 0
    error = None
    for i in range(1000):
        batch = build_batch([(None, b"v%05d" % i + b"x" * 3000, [], 1_700_000_000_000)])
        try:
            info = log.append_as_leader(batch, 0, 1_700_000_000_000)
        except KafkaError as exc:
            error = exc
            break
        appended += 1
        assert info.last_offset == i
    assert error is not None and error.code == ErrorCode.KAFKA_STORAGE_ERROR, error
    seg = log.active_segment
    on_disk = os.path.getsize(seg.log_path)
    assert on_disk == seg.size, (on_disk, seg.size)          # no partial batch left behind
    assert log.log_end_offset == appended
    assert channel.is_offline(root), channel.offline
    try:
        log.append_as_leader(build_batch([(None, b"late", [], 1)]), 0, 1)
        raise AssertionError("append to an offline directory succeeded")
    except KafkaError as exc:
        assert exc.code == ErrorCode.KAFKA_STORAGE_ERROR
    try:
        log.read(0, 1000)
        raise AssertionError("read of an offline directory succeeded")
    except KafkaError as exc:
        assert exc.code == ErrorCode.KAFKA_STORAGE_ERROR
    print(appended)
""")


def test_short_write_leaves_no_partial_batch_and_takes_the_directory_offline(tmp_path):
    res = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60,
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    appended = int(res.stdout.strip())
    assert 10 < appended < 1000

    from kbroker.protocol.records import iter_batches
    from kbroker.storage.config import LogConfig
    from kbroker.storage.log import PartitionLog

    log = PartitionLog(tmp_path / "t-0", LogConfig(), clean_shutdown=False, recovery_point=0)
    try:
        assert log.log_end_offset == appended
        data = log.read(0, 100 * 1024 * 1024).read_bytes()
        values = [next(iter(b.records())).value[:6] for b in iter_batches(data)]
        assert values == [b"v%05d" % i for i in range(appended)]
    finally:
        log.close()
