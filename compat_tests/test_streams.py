"""Kafka Streams applications on one broker (issue 35, items 1 and 2: the classic and the streams group protocols).

Each app is compat_tests/java/StreamsDriver.java (kafka-streams 4.3.1 from Maven Central, ``scripts/fetch_jars.sh
streams``) in its own JVM, with ``processing.guarantee=exactly_once_v2`` and the record cache off, so every update
reaches the output. The input is known; the output is read from the start with ``isolation.level=read_committed``
(confluent-kafka) and compared with what the app must produce, exactly:

* word count: KStream -> groupBy(word) (a repartition topic) -> count; each word's counts run 1..n;
* KTable-KTable inner join: both tables' changelogs replayed in timestamp order; every update of a key that has a
  partner emits ``left+right``, a tombstone of such a key emits a tombstone;
* windowed count with ``suppress(untilWindowCloses)``: one final count per window, emitted once stream time has
  passed the window's end plus grace, and nothing for the windows still open or for a record past the grace;
* running sums with ``num.standby.replicas=1`` and two instances: each instance holds standby replicas of the
  other's tasks; after a kill -9 of one, the other takes over from its standbys and the sums stay exact.

Each app runs with the classic group protocol and with the streams rebalance protocol (KIP-1071,
``group.protocol=streams``: the broker's streams group assigns the tasks); ``test_streams_group_describe_and_list``
checks StreamsGroupDescribe, ListGroups and DescribeGroups of a running streams group.

The 3-node cluster with kills is compat_tests/test_streams_cluster.py.
"""

from __future__ import annotations

import collections
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from compat_tests.streams_support import StreamsApp, by_key, produce, read_committed, unique

pytestmark = pytest.mark.timeout(180)

VOCABULARY = ["kafka", "stream", "table", "join", "window", "broker", "topic", "partition", "offset", "commit",
              "record", "state", "store", "changelog", "replica"]


@pytest.fixture
def streams_apps(streams_driver: list[str], tmp_path: Path) -> Iterator[Callable[..., StreamsApp]]:
    """``start(app, name, bootstrap, application_id, state_dir=None, **options)`` -> a running :class:`StreamsApp`
    with its own state directory under ``tmp_path`` (or ``state_dir``); all killed at teardown."""
    started: list[StreamsApp] = []

    def start(app: str, name: str, bootstrap: str, application_id: str, state_dir: Path | None = None,
              **options: Any) -> StreamsApp:
        s = StreamsApp(streams_driver, app, name, bootstrap, application_id, state_dir or tmp_path / f"state-{name}",
                       **options)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def word_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 6))) for _ in range(n)]


def assert_counts_run_one_to_n(records: list[tuple[int, int, str | None, str | None]],
                               expected: collections.Counter[str]) -> None:
    got = by_key(records)
    assert set(got) == set(expected), f"words {sorted(got)} != {sorted(expected)}"
    bad = {w: got[w] for w in expected if got[w] != [str(i) for i in range(1, expected[w] + 1)]}
    assert not bad, f"counts that do not run 1..n: {dict(list(bad.items())[:3])}"


@pytest.mark.kafka_reference  # ~50 s against Kafka
@pytest.mark.parametrize("group_protocol", ["classic", "streams"])
def test_word_count_exactly_once(streams_apps: Callable[..., StreamsApp], bootstrap_servers: str,
                                 topic_factory: Callable[..., str], group_protocol: str) -> None:
    """Word count with exactly_once_v2: input produced before and while the app runs; the read_committed output
    holds each word's counts 1..n exactly once. The internal topics carry Kafka Streams' names and configs; the
    records of the repartition topic the app has consumed are purged (Admin deleteRecords, every
    ``repartition.purge.interval.ms``); after a clean close the app restarts from its checkpointed state (its
    restore starts at the checkpoint, not at the changelog's start) and the counts go on."""
    source, sink = topic_factory(3), topic_factory(3)
    app_id = unique("wordcount")
    repartition, changelog = f"{app_id}-words-repartition", f"{app_id}-counts-changelog"
    first, second, third = word_lines(60, 1), word_lines(60, 2), word_lines(60, 3)
    opts = {"input": source, "output": sink,
            "prop": ["repartition.purge.interval.ms=500", f"group.protocol={group_protocol}"]}
    produce(bootstrap_servers, source, [(None, line, None) for line in first])
    app = streams_apps("wordcount", "wc", bootstrap_servers, app_id, **opts)
    app.wait_running(timeout=90, active=6)  # 3 source tasks and 3 count tasks (the repartition topic)
    produce(bootstrap_servers, source, [(None, line, None) for line in second])
    expected = collections.Counter(w for line in first + second for w in line.split())
    records = read_committed(bootstrap_servers, sink, 3, sum(expected.values()), timeout=90)
    assert_counts_run_one_to_n(records, expected)
    assert not app.errors(), app.errors()

    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigResource

    from compat_tests.clients import admin_client

    admin = admin_client(bootstrap_servers)
    assert {repartition, changelog} <= set(admin.list_topics(timeout=10).topics)
    configs = {name: admin.describe_configs([ConfigResource("topic", name)])[ConfigResource("topic", name)]
               .result(30) for name in (repartition, changelog)}
    assert configs[changelog]["cleanup.policy"].value == "compact"
    assert configs[repartition]["cleanup.policy"].value == "delete"
    assert configs[repartition]["retention.ms"].value == "-1"
    reader = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": unique("lso")})
    try:
        def purged() -> bool:
            return any(reader.get_watermark_offsets(TopicPartition(repartition, p), timeout=5)[0] > 0
                       for p in range(3))
        deadline = time.monotonic() + 30
        while not purged():
            assert time.monotonic() < deadline, f"{repartition} not purged (log start offsets all 0) after 30 s"
            time.sleep(0.5)
    finally:
        reader.close()

    app.stop()
    assert {"event": "closed", "clean": True} in app.snapshot(), app.snapshot()[-4:]
    produce(bootstrap_servers, source, [(None, line, None) for line in third])
    again = streams_apps("wordcount", "wc2", bootstrap_servers, app_id, state_dir=app.state_dir, **opts)
    expected += collections.Counter(w for line in third for w in line.split())
    records = read_committed(bootstrap_servers, sink, 3, sum(expected.values()), timeout=90)
    assert_counts_run_one_to_n(records, expected)
    starts = [e for e in again.snapshot() if e["event"] == "restore_start" and e["store"] == "counts"]
    assert starts and all(e["start"] > 0 for e in starts), f"not restored from the checkpoint: {starts}"
    assert not again.errors(), again.errors()


# ============================================================================================ KTable-KTable join

# an hour ago, a whole minute (so windows start at T0 + k * size): recent enough that no retention.ms deletes the
# input or the changelogs while the test runs
T0 = (int(time.time() * 1000) // 60_000) * 60_000 - 3_600_000


def join_input(seed: int) -> list[tuple[str, str, str | None, int]]:
    """``(side "L"|"R", key, value or None, timestamp)`` in timestamp order: updates of 12 keys on both sides,
    and tombstones only of keys present on their side."""
    rng = random.Random(seed)
    present: dict[str, set[str]] = {"L": set(), "R": set()}
    out = []
    for i in range(160):
        side, key = rng.choice("LR"), f"k{rng.randrange(12)}"
        if key in present[side] and rng.random() < 0.15:
            present[side].discard(key)
            out.append((side, key, None, T0 + 10 * i))
        else:
            present[side].add(key)
            out.append((side, key, f"{side.lower()}{i}", T0 + 10 * i))
    return out


def expected_join(events: list[tuple[str, str, str | None, int]]) -> dict[str, list[str | None]]:
    """Each key's join output: an update of a key with a partner on the other side emits ``left+right``, a
    tombstone of such a key a tombstone; a key without a partner emits nothing."""
    tables: dict[str, dict[str, str]] = {"L": {}, "R": {}}
    out: dict[str, list[str | None]] = {}
    for side, key, value, _ in events:
        if value is None:
            tables[side].pop(key, None)
        else:
            tables[side][key] = value
        other = tables["R" if side == "L" else "L"]
        if key in other:
            joined = None if value is None else (f"{value}+{other[key]}" if side == "L" else f"{other[key]}+{value}")
            out.setdefault(key, []).append(joined)
    return out


@pytest.mark.kafka_reference  # ~25 s against Kafka
@pytest.mark.parametrize("group_protocol", ["classic", "streams"])
def test_ktable_ktable_join(streams_apps: Callable[..., StreamsApp], bootstrap_servers: str,
                            topic_factory: Callable[..., str], group_protocol: str) -> None:
    """Two tables from co-partitioned topics, inner-joined: the output, per key, is exactly the model's. All input
    is written first, so each task replays its two partitions in timestamp order."""
    left, right, sink = topic_factory(2), topic_factory(2), topic_factory(2)
    events = join_input(3)
    produce(bootstrap_servers, left, [(k, v, ts) for side, k, v, ts in events if side == "L"])
    produce(bootstrap_servers, right, [(k, v, ts) for side, k, v, ts in events if side == "R"])
    expected = expected_join(events)
    app = streams_apps("join", "join", bootstrap_servers, unique("join"), input=left, input2=right, output=sink,
                       prop=[f"group.protocol={group_protocol}"])
    records = read_committed(bootstrap_servers, sink, 2, sum(map(len, expected.values())), timeout=90)
    assert by_key(records) == expected
    assert not app.errors(), app.errors()


# ============================================================================================ windows + suppress

WINDOW_MS, GRACE_MS = 10_000, 2_000


def suppress_input(seed: int) -> list[tuple[str, int]]:
    """``(key, timestamp)`` in the order written: mostly advancing time, some records up to 1.5 s out of order
    (inside the grace), two far behind stream time (dropped), and a last record far ahead that closes the
    earlier windows."""
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    t = T0
    for i in range(120):
        t += rng.randint(0, 700)
        ts = t - rng.randint(0, 1500) if rng.random() < 0.2 else t
        out.append((rng.choice("abc"), ts))
        if i in (60, 90):
            out.append(("a", t - 3 * WINDOW_MS))  # past the grace: dropped
    out.append(("a", t + 5 * WINDOW_MS))
    return out


def expected_suppress(records: list[tuple[str, int]]) -> dict[str, list[str]]:
    """``"<key>@<window start>" -> [final count]`` of every window closed by the end (window end + grace <= stream
    time); a record whose window had closed when it came is dropped."""
    stream_time = -1
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for key, ts in records:
        stream_time = max(stream_time, ts)
        start = ts - ts % WINDOW_MS
        if start + WINDOW_MS > stream_time - GRACE_MS:
            counts[(key, start)] += 1
    return {f"{k}@{s}": [str(n)] for (k, s), n in counts.items() if s + WINDOW_MS <= stream_time - GRACE_MS}


@pytest.mark.parametrize("group_protocol", ["classic", "streams"])
def test_windowed_count_with_suppress_until_window_closes(streams_apps: Callable[..., StreamsApp],
                                                          bootstrap_servers: str,
                                                          topic_factory: Callable[..., str],
                                                          group_protocol: str) -> None:
    """Tumbling 10 s windows with 2 s grace, counted and suppressed until each window closes: one final count per
    closed window, none for the open ones or for the dropped late records."""
    source, sink = topic_factory(1), topic_factory(1)
    records = suppress_input(5)
    expected = expected_suppress(records)
    app = streams_apps("suppress", "suppress", bootstrap_servers, unique("suppress"), input=source, output=sink,
                       window_ms=WINDOW_MS, grace_ms=GRACE_MS, prop=[f"group.protocol={group_protocol}"])
    app.wait_running(timeout=90, active=1)
    produce(bootstrap_servers, source, [(k, "x", ts) for k, ts in records])
    got = read_committed(bootstrap_servers, sink, 1, len(expected), timeout=90)
    assert by_key(got) == expected
    assert not app.errors(), app.errors()


# ============================================================================================ standby replicas


@pytest.mark.parametrize("group_protocol", ["classic", "streams"])
def test_standby_replicas_take_over_after_kill9(streams_apps: Callable[..., StreamsApp], bootstrap_servers: str,
                                                topic_factory: Callable[..., str], group_protocol: str) -> None:
    """Running sums with one standby replica per task and two instances: each is active for one task and keeps a
    standby replica of the other's. After a kill -9 of one, the other runs both tasks from its standby's state
    (it restores only what the standby had not yet read, not the changelog from its start), and the running sums
    stay exact. With the classic protocol the app's ``num.standby.replicas=1`` decides; with the streams protocol
    (KIP-1071) the group config ``streams.num.standby.replicas=1`` does (set before the app starts), and the killed
    member leaves the group after the streams session timeout (45 s, the least ``group.streams.min.session.timeout.ms``
    allows)."""
    source, sink = topic_factory(2), topic_factory(2)
    app_id = unique("sums")
    opts: dict[str, Any] = {"input": source, "output": sink, "standby": 1, "prop": [f"group.protocol={group_protocol}"]}
    if group_protocol == "streams":
        set_group_config(bootstrap_servers, app_id, "streams.num.standby.replicas", "1")
    a = streams_apps("sum", "a", bootstrap_servers, app_id, **opts)
    b = streams_apps("sum", "b", bootstrap_servers, app_id, **opts)
    a.wait_running(timeout=90, active=1, standby=1)
    b.wait_running(timeout=90, active=1, standby=1)
    rng = random.Random(7)
    first = [(f"k{rng.randrange(10)}", str(rng.randint(1, 100))) for _ in range(150)]
    second = [(f"k{rng.randrange(10)}", str(rng.randint(1, 100))) for _ in range(150)]
    produce(bootstrap_servers, source, [(k, v, None) for k, v in first])
    read_committed(bootstrap_servers, sink, 2, len(first), timeout=60, idle=0.5)
    assert any(e["event"] == "standby_start" and e["store"] == "sums" for e in b.snapshot()), b.snapshot()
    a_task = a.tasks()["active"][0]
    mark = len(b.snapshot())
    a.kill()
    b.wait_running(timeout=60 if group_protocol == "classic" else 100, active=2, standby=0)
    produce(bootstrap_servers, source, [(k, v, None) for k, v in second])
    expected: dict[str | None, list[str | None]] = {}
    totals: collections.Counter[str] = collections.Counter()
    for k, v in first + second:
        totals[k] += int(v)
        expected.setdefault(k, []).append(str(totals[k]))
    got = read_committed(bootstrap_servers, sink, 2, len(first) + len(second), timeout=90)
    assert by_key(got) == expected
    partition = int(a_task.split("_")[1])
    restores = [e for e in b.snapshot()[mark:] if e["event"] == "restore_start" and e["store"] == "sums"
                and e["partition"] == partition]
    assert restores and all(e["start"] > 0 for e in restores), \
        f"b restored {a_task} from the changelog's start: {restores}"
    assert not b.errors(), b.errors()


# ============================================================================================ streams groups


def set_group_config(bootstrap: str, group: str, key: str, value: str) -> None:
    """IncrementalAlterConfigs SET of a group config (ConfigResource type GROUP, 32), as kafka-configs
    ``--entity-type groups`` sends it."""
    from kbroker.cli._wire import WireClient
    from kbroker.protocol import messages as m

    R = m.IncrementalAlterConfigsRequest
    req = R(resources=[R.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        R.AlterableConfig(name=key, config_operation=0, value=value)])])
    with WireClient(bootstrap) as wire:
        resp = wire.send(req)
    assert [(r.error_code, r.error_message) for r in resp.responses] == [(0, None)], resp


def _streams_coordinator(wire: Any, group: str) -> Any:
    from kbroker.protocol import messages as m

    deadline = time.monotonic() + 30
    while True:
        found = wire.send(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0]
        if found.error_code == 0:
            return wire.node(found.node_id)
        assert time.monotonic() < deadline, f"no coordinator for {group}: error {found.error_code}"
        time.sleep(0.5)


def test_streams_group_describe_and_list(streams_apps: Callable[..., StreamsApp], bootstrap_servers: str,
                                         topic_factory: Callable[..., str]) -> None:
    """Word count with ``group.protocol=streams`` (KIP-1071): StreamsGroupDescribe v0 shows the group Stable with the
    app's topology (subtopology 0 reads the input and writes the repartition topic; subtopology 1 reads that and
    keeps the ``counts`` changelog) and its one member (one stream thread) owning all six active tasks at the
    assignment epoch, current and target assignment alike; ListGroups lists it as a ``streams`` group; the classic
    DescribeGroups does not describe it (GROUP_ID_NOT_FOUND). Kafka's ``kafka-streams-groups`` tool lists it and
    describes its offsets, state and members."""
    from kbroker.cli._wire import WireClient
    from kbroker.protocol import messages as m

    source, sink = topic_factory(3), topic_factory(3)
    app_id = unique("describe")
    app = streams_apps("wordcount", "wc", bootstrap_servers, app_id, input=source, output=sink,
                       prop=["group.protocol=streams"])
    app.wait_running(timeout=90, active=6)
    with WireClient(bootstrap_servers) as wire:
        conn = _streams_coordinator(wire, app_id)

        def describe() -> Any:
            resp = conn.send(m.StreamsGroupDescribeRequest(group_ids=[app_id]), 0)
            assert len(resp.groups) == 1 and resp.groups[0].error_code == 0, resp
            return resp.groups[0]

        deadline = time.monotonic() + 30
        while (g := describe()).group_state != "Stable":
            assert time.monotonic() < deadline, f"group not Stable: {g}"
            time.sleep(0.5)
        assert g.group_id == app_id and g.group_epoch >= g.assignment_epoch >= 1
        subs = {s.subtopology_id: s for s in g.topology.subtopologies}
        assert sorted(subs) == ["0", "1"]
        assert subs["0"].source_topics == [source]
        assert subs["0"].repartition_sink_topics == [f"{app_id}-words-repartition"]
        assert [t.name for t in subs["1"].repartition_source_topics] == [f"{app_id}-words-repartition"]
        assert [t.name for t in subs["1"].state_changelog_topics] == [f"{app_id}-counts-changelog"]
        assert len(g.members) == 1
        member = g.members[0]
        assert member.member_epoch == g.assignment_epoch and member.process_id
        active = {(t.subtopology_id, p) for t in member.assignment.active_tasks for p in t.partitions}
        assert active == {(s, p) for s in ("0", "1") for p in range(3)}
        assert not member.assignment.standby_tasks and not member.assignment.warmup_tasks
        target = {(t.subtopology_id, p) for t in member.target_assignment.active_tasks for p in t.partitions}
        assert target == active

        listed = conn.send(m.ListGroupsRequest(types_filter=["streams"]), 5).groups
        assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed
                if x.group_id == app_id] == [(app_id, "streams", "Stable", "streams")]
        classic = conn.send(m.DescribeGroupsRequest(groups=[app_id]), 6).groups[0]
        assert (classic.error_code, classic.error_message) == (69, f"Group {app_id} is not a classic group."), \
            classic  # GROUP_ID_NOT_FOUND

    # Kafka's own kafka-streams-groups (StreamsGroupCommand: Admin listGroups, describeStreamsGroups,
    # listStreamsGroupOffsets) reads the same group
    def tool(*args: str) -> list[list[str]]:
        from kbroker.testing.kafka import run_kafka_tool

        r = run_kafka_tool("org.apache.kafka.tools.streams.StreamsGroupCommand", "--bootstrap-server",
                           bootstrap_servers, *args, timeout=90)
        assert r.returncode == 0, (args, r.stdout, r.stderr[-2000:])
        return [line.split() for line in r.stdout.splitlines() if line.strip() and not line[:4].isdigit()]

    assert [app_id] in tool("--list")
    assert [app_id, "Stable"] in tool("--list", "--state")
    offsets = tool("--describe", "--group", app_id)
    assert offsets[0] == ["GROUP", "TOPIC", "PARTITION", "OFFSET-LAG"]
    assert sorted(offsets[1:]) == sorted([app_id, t, str(p), "0"] for t in (source, f"{app_id}-words-repartition")
                                         for p in range(3))
    state = tool("--describe", "--group", app_id, "--state", "--verbose")
    assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert [state[1][0]] + state[1][3:] == [app_id, "Stable", str(g.group_epoch), str(g.assignment_epoch), "1"]
    members = tool("--describe", "--group", app_id, "--members", "--verbose")
    assert members[0] == ["GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER", "MEMBER-PROTOCOL",
                          "MEMBER-EPOCH", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
    row = members[1]
    assert row[:7] == [app_id, str(g.assignment_epoch), "0", member.member_id, "streams", str(member.member_epoch),
                       member.process_id]
    assert row[7].endswith("-StreamThread-1-consumer")
    assert row[8:] == ["ACTIVE:", "0:[0,1,2];", "1:[0,1,2];", "TARGET-ACTIVE:", "0:[0,1,2];", "1:[0,1,2];"]

    # kbroker's kbroker-streams-groups prints what kafka-streams-groups prints (rows sorted: Kafka's come in hash
    # order)
    import subprocess
    import sys

    from kbroker.testing.kafka import run_kafka_tool

    for args in (["--list"], ["--list", "--state"], ["--describe", "--group", app_id],
                 ["--describe", "--group", app_id, "--state"],
                 ["--describe", "--group", app_id, "--state", "--verbose"],
                 ["--describe", "--group", app_id, "--members"],
                 ["--describe", "--group", app_id, "--members", "--verbose"]):
        theirs = run_kafka_tool("org.apache.kafka.tools.streams.StreamsGroupCommand", "--bootstrap-server",
                                bootstrap_servers, *args, timeout=90)
        ours = subprocess.run([sys.executable, "-m", "kbroker.cli.streams_groups", "--bootstrap-server",
                               bootstrap_servers, *args], capture_output=True, text=True, timeout=60)
        assert ours.returncode == theirs.returncode == 0, (args, ours.stderr[-2000:], theirs.stderr[-2000:])

        def rows(text: str) -> list[str]:
            got = [line.rstrip() for line in text.splitlines() if line.strip() and not line[:4].isdigit()]
            return got[:1] + sorted(got[1:]) if got and got[0].startswith("GROUP") else sorted(got)

        if args == ["--list"] or args == ["--list", "--state"]:  # other tests' groups come and go meanwhile
            assert [r for r in rows(ours.stdout) if app_id in r] == [r for r in rows(theirs.stdout) if app_id in r]
        else:
            assert rows(ours.stdout) == rows(theirs.stdout), args
    assert not app.errors(), app.errors()
