"""kbroker-reassign-partitions and kbroker-leader-election offline: their JSON files, Kafka's replica placement for
--generate (the examples of ``AdminUtils``' documentation), the throttle values, the reports, the argument checks,
and the actions against a stub protocol client (ongoing reassignments, refused partitions, --additional), which
a cluster cannot show while kbroker's reassignments complete at once."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace
from typing import Any

import pytest

from kbroker.cli import leader_election, reassign_partitions as rp
from kbroker.cli._common import CliError
from kbroker.cli._wire import Reassignment
from kbroker.protocol.errors import ErrorCode


class FixedRandom(random.Random):
    """Kafka's ``fixedStartIndex`` 0: start index and shift both 0."""

    def randrange(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        return 0


# ------------------------------------------------------------------------------------------ JSON files


def test_topics_to_move_file():
    assert rp.parse_topics_to_move('{"topics": [{"topic": "a"}, {"topic": "b"}], "version": 1}') == ["a", "b"]
    assert rp.parse_topics_to_move('{"version": 1}') == []
    for text, message in [('{"topics": [{"topic": "a"}, {"topic": "a"}]}',
                           "List of topics to reassign contains duplicate entries: [a]"),
                          ('{"topics": [], "version": 2}', "Not supported version field value 2"),
                          ('{"topics": [{"topic": "a"}', "The input string is not a valid JSON"),
                          ('{"topics": [{"name": "a"}]}', 'Missing "topic" field')]:
        with pytest.raises(CliError, match=message.replace("[", r"\[").replace("]", r"\]")):
            rp.parse_topics_to_move(text)


def test_broker_list():
    assert rp.parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(CliError, match=r"Broker list contains duplicate entries: \[1\]"):
        rp.parse_broker_list("1,2,1")
    with pytest.raises(CliError, match='For input string: "x"'):
        rp.parse_broker_list("1,x")


def test_reassignment_file():
    parts, dirs = rp.parse_reassignment(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2]},
        {"topic": "t", "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "/data/d2"]}]}))
    assert parts == [(("t", 0), [1, 2]), (("t", 1), [2, 3])]
    assert dirs == {("t", 1, 3): "/data/d2"}
    with pytest.raises(CliError, match=r"Size of replicas list \[1, 2\] is different from size of log dirs list "
                                       r"\[any\] for partition t-0"):
        rp.parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}')
    with pytest.raises(CliError, match='Missing "replicas" field'):
        rp.parse_reassignment('{"partitions": [{"topic": "t", "partition": 0}]}')
    with pytest.raises(CliError, match="must be an integer"):
        rp.parse_reassignment('{"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}')


def test_execute_checks():
    ok = rp.check_execute_targets([(("t", 0), [1, 2]), (("t", 1), [2, 1])])
    assert ok == {("t", 0): [1, 2], ("t", 1): [2, 1]}
    for parts, message in [([], "Partition reassignment list cannot be empty"),
                           ([(("t", 0), [])], "Partition replica list cannot be empty"),
                           ([(("t", 0), [1]), (("t", 0), [2])],
                            "Partition reassignment contains duplicate topic partitions: t-0"),
                           ([(("t", 0), [1, 1]), (("u", 2), [3, 2, 3])],
                            "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
                            "entries for 1. u-2 contains multiple entries for 3")]:
        with pytest.raises(CliError, match=message):
            rp.check_execute_targets(parts)


def test_reassignment_json_is_kafkas_compact_sorted_form():
    text = rp.reassignment_json({("t", 10): [2, 1], ("t", 2): [1], ("a", 0): [3]})
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[3],"log_dirs":["any"]},'
                    '{"topic":"t","partition":2,"replicas":[1],"log_dirs":["any"]},'
                    '{"topic":"t","partition":10,"replicas":[2,1],"log_dirs":["any","any"]}]}')
    parts, _ = rp.parse_reassignment(text)
    assert dict(parts) == {("t", 10): [2, 1], ("t", 2): [1], ("a", 0): [3]}


# ------------------------------------------------------------------------------------------ --generate


def test_rack_unaware_placement_is_kafkas():
    """AdminUtils' example: 5 brokers, 10 partitions, RF 3, start index and shift 0."""
    got = rp.assign_replicas([(b, None) for b in range(5)], 10, 3, FixedRandom())
    assert got == {p: [p, (p + 1) % 5, (p + 2) % 5] for p in range(5)} | {
        p: [p - 5, (p - 3) % 5, (p - 2) % 5] for p in range(5, 10)}


def test_rack_aware_placement_is_kafkas():
    """AdminUtils' example: racks 0:rack1 1:rack3 2:rack3 3:rack2 4:rack2 5:rack1 alternate as 0,3,1,5,4,2; the
    seventh partition shifts its followers by the number of racks."""
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = rp.assign_replicas(sorted(racks.items()), 7, 3, FixedRandom())
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}


def test_proposal_keeps_partitions_and_replication_factor():
    current = {("t", p): [1, 2] for p in range(6)} | {("u", 0): [3]}
    brokers = [(2, None), (4, None), (5, None)]
    for seed in range(20):
        proposed = rp.propose_assignment(current, brokers, random.Random(seed))
        assert sorted(proposed) == sorted(current)
        for tp, replicas in proposed.items():
            assert len(replicas) == len(current[tp]) and len(set(replicas)) == len(replicas)
            assert set(replicas) <= {2, 4, 5}
        leaders = [proposed[("t", p)][0] for p in range(6)]
        assert sorted(leaders.count(b) for b in (2, 4, 5)) == [2, 2, 2]  # leaders spread evenly
    with pytest.raises(CliError, match="Replication factor: 2 larger than available brokers: 1."):
        rp.propose_assignment(current, [(2, None)])


def test_generate_brokers_and_racks():
    registered = [(1, "a"), (2, "b"), (3, None), (4, "a")]
    assert rp.generate_brokers(registered, [1, 2, 9], rack_aware=True) == [(1, "a"), (2, "b")]
    with pytest.raises(CliError, match="Not all brokers have rack information. Add --disable-rack-aware"):
        rp.generate_brokers(registered, [1, 3], rack_aware=True)
    assert rp.generate_brokers(registered, [1, 3], rack_aware=False) == [(1, None), (3, None)]


# ------------------------------------------------------------------------------------------ throttles


def test_throttle_values():
    current = {("t", 0): [1, 2, 3], ("t", 10): [1, 2], ("u", 2): [4]}
    proposed = {("t", 0): [3, 2, 1], ("t", 10): [2, 3], ("u", 2): [5]}
    ongoing = {("v", 0): Reassignment((1, 2, 6), (6,), (1,))}
    moves = rp.move_map(ongoing, proposed, current)
    assert rp.leader_throttles(moves) == {"t": "0:1,0:2,0:3,10:1,10:2", "u": "2:4", "v": "0:1,0:2"}
    assert rp.follower_throttles(moves) == {"t": "10:3", "u": "2:5", "v": "0:6"}
    assert rp.reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6]
    # a partition already being reassigned keeps its sources
    again = rp.move_map(ongoing, {("v", 0): [2, 6, 7]}, {("v", 0): [1, 2, 6]})
    assert (again["v"][0].sources, again["v"][0].destinations) == ({1, 2}, {6, 7})


def test_reports():
    states = {("t", 1): rp.PartitionState((1, 2), (1, 2), True), ("t", 0): rp.PartitionState((1, 2), (2, 3), False),
              ("a", 0): rp.PartitionState((1,), (2,), True)}
    assert rp.status_lines(states) == [
        "Status of partition reassignment:",
        "There is no active reassignment of partition a-0, but replica set is 1 rather than 2.",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is completed.",
    ]
    assert rp.list_lines({}) == ["No partition reassignments found."]
    assert rp.list_lines({("t", 0): Reassignment((1, 2, 3), (3,), (1,)), ("s", 1): Reassignment((2, 1), (), ())}) == [
        "Current partition reassignments:", "s-1: replicas: 2,1.", "t-0: replicas: 1,2,3. adding: 3. removing: 1."]


@pytest.mark.parametrize("argv,message", [
    (["--list", "--throttle", "5"], 'Option "[throttle]" can\'t be used with action "[list]"'),
    (["--verify", "--reassignment-json-file", "f", "--additional"],
     'Option "[additional]" can\'t be used with action "[verify]"'),
    (["--generate", "--topics-to-move-json-file", "f"], 'Missing required argument "[broker-list]"'),
    (["--generate", "--broker-list", "1", "--reassignment-json-file", "f"], 'Missing required argument '
                                                                          '"[topics-to-move-json-file]"'),
    (["--cancel", "--reassignment-json-file", "f", "--disable-rack-aware"],
     'Option "[disable-rack-aware]" can\'t be used with action "[cancel]"'),
    (["--execute", "--verify", "--reassignment-json-file", "f"], "exactly one action"),
])
def test_reassign_argument_checks(run, argv, message):
    status, _, err = run(rp.main, "--bootstrap-server", "x:1", *argv)
    assert status == 1 and message in err and "usage:" in err


# ------------------------------------------------------------------------------------------ actions (stub client)


class StubWire:
    """What :class:`ReassignService` asks of ``WireClient``, answered from memory."""

    def __init__(self, replicas: dict[tuple[str, int], list[int]], ongoing: dict[tuple[str, int], Reassignment],
                 refuse: dict[tuple[str, int], tuple[int, str | None]] | None = None) -> None:
        self.replicas, self.ongoing, self.refuse = replicas, ongoing, refuse or {}
        self.altered: list[dict[tuple[str, int], Any]] = []
        self.configs: list[tuple[int, str, list[tuple[str, int, str | None]]]] = []

    def metadata(self, topics: list[str] | None = None) -> Any:
        brokers = [SimpleNamespace(node_id=b, rack=None) for b in (1, 2, 3)]
        names = sorted({t for t, _ in self.replicas}) if topics is None else topics
        out = []
        for name in names:
            parts = [SimpleNamespace(partition_index=p, replica_nodes=r) for (t, p), r in self.replicas.items()
                     if t == name]
            out.append(SimpleNamespace(name=name, error_code=0 if parts else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       partitions=parts))
        return SimpleNamespace(brokers=brokers, topics=out)

    def list_partition_reassignments(self, partitions: Any = None) -> dict[tuple[str, int], Reassignment]:
        return {tp: r for tp, r in self.ongoing.items() if partitions is None or tp in set(partitions)}

    def alter_partition_reassignments(self, targets: Any, timeout_ms: int = 0) -> Any:
        self.altered.append(dict(targets))
        return {tp: self.refuse.get(tp, (0, None)) for tp in targets}

    def incremental_alter_configs(self, resources: Any) -> list[tuple[int, str | None]]:
        self.configs.extend(resources)
        return [(0, None)] * len(resources)

    def close(self) -> None:
        pass


@pytest.fixture
def stub(monkeypatch):
    holder: dict[str, StubWire] = {}

    def install(wire: StubWire) -> StubWire:
        holder["wire"] = wire
        monkeypatch.setattr("kbroker.cli._wire.WireClient", lambda *a, **k: wire)
        return wire

    return install


def plan(tmp_path, parts: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / "plan.json"
    path.write_text(rp.reassignment_json(parts))
    return str(path)


def test_execute_refused_partitions(run, stub, tmp_path):
    wire = stub(StubWire({("t", 0): [1, 2], ("t", 1): [2, 3]}, {},
                         refuse={("t", 1): (ErrorCode.INVALID_REPLICA_ASSIGNMENT, None)}))
    status, out, err = run(rp.main, "--bootstrap-server", "x:1", "--execute", "--reassignment-json-file",
                           plan(tmp_path, {("t", 0): [2, 1], ("t", 1): [3, 1]}))
    assert status == 1
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert err == "kbroker-reassign-partitions: Error reassigning partition(s):\nt-1: Replica assignment is invalid.\n"
    assert wire.altered == [{("t", 0): [2, 1], ("t", 1): [3, 1]}]


def test_execute_needs_additional_while_a_reassignment_runs(run, stub, tmp_path):
    ongoing = {("t", 1): Reassignment((2, 3, 1), (1,), (3,))}
    wire = stub(StubWire({("t", 0): [1, 2], ("t", 1): [2, 3, 1]}, ongoing))
    path = plan(tmp_path, {("t", 0): [2, 1]})
    status, out, err = run(rp.main, "--bootstrap-server", "x:1", "--execute", "--reassignment-json-file", path)
    assert status == 1 and "Cannot execute because there is an existing partition assignment.  Use --additional" in err
    assert wire.altered == []
    status, out, err = run(rp.main, "--bootstrap-server", "x:1", "--execute", "--reassignment-json-file", path,
                           "--additional", "--throttle", "1024")
    assert status == 0, err
    assert out.splitlines()[-3:] == [
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is "
        "removed.", "The inter-broker throttle limit was set to 1024 B/s", "Successfully started partition "
                                                                            "reassignment for t-0"]
    # the ongoing reassignment's topic partition is throttled too: sources 2,3 and destination 1
    assert wire.configs[0] == (rp.TOPIC, "t", [("leader.replication.throttled.replicas", 0, "0:1,0:2,1:2,1:3"),
                                               ("follower.replication.throttled.replicas", 0, "1:1")])
    assert [(rtype, name) for rtype, name, _ in wire.configs[1:]] == [(rp.BROKER, "1"), (rp.BROKER, "2"),
                                                                      (rp.BROKER, "3")]
    assert wire.configs[1][2] == [("leader.replication.throttled.rate", 0, "1024"),
                                  ("follower.replication.throttled.rate", 0, "1024")]


def test_verify_in_progress_keeps_throttles_and_cancel_clears_them(run, stub, tmp_path):
    ongoing = {("t", 1): Reassignment((2, 3, 1), (1,), (3,))}
    wire = stub(StubWire({("t", 0): [1, 2], ("t", 1): [2, 3, 1]}, ongoing))
    path = plan(tmp_path, {("t", 0): [1, 2], ("t", 1): [2, 1]})
    status, out, _ = run(rp.main, "--bootstrap-server", "x:1", "--verify", "--reassignment-json-file", path)
    assert status == 0
    assert out == ("Status of partition reassignment:\nReassignment of partition t-0 is completed.\n"
                   "Reassignment of partition t-1 is still in progress.\n\n")
    assert wire.configs == []
    status, out, _ = run(rp.main, "--bootstrap-server", "x:1", "--list")
    assert out == "Current partition reassignments:\nt-1: replicas: 2,3,1. adding: 1. removing: 3.\n"
    status, out, _ = run(rp.main, "--bootstrap-server", "x:1", "--cancel", "--reassignment-json-file", path)
    assert status == 0
    assert out.splitlines() == ["Successfully cancelled partition reassignment for: t-1",
                                "None of the specified partition moves are active.",
                                "Clearing broker-level throttles on brokers 1,2,3",
                                "Clearing topic-level throttles on topic t"]
    assert wire.altered == [{("t", 1): None}]
    assert [(rtype, name) for rtype, name, _ in wire.configs] == [(rp.BROKER, "1"), (rp.BROKER, "2"),
                                                                  (rp.BROKER, "3"), (rp.TOPIC, "t")]
    assert [k for k, op, _ in wire.configs[0][2]] == list(rp.BROKER_LEVEL_THROTTLES)
    assert all(op == rp.OP_DELETE for _, _, ops in wire.configs for _, op, _ in ops)


def test_log_dirs_are_refused_by_cancel(run, stub, tmp_path):
    stub(StubWire({("t", 0): [1, 2]}, {}))
    path = tmp_path / "dirs.json"
    path.write_text('{"partitions": [{"topic": "t", "partition": 0, "replicas": [2, 1], "log_dirs": ["/d", "any"]}]}')
    status, _, err = run(rp.main, "--bootstrap-server", "x:1", "--cancel", "--reassignment-json-file", path)
    assert status == 1 and "log_dirs must be \"any\"" in err


# ------------------------------------------------------------------------------------------ kbroker-leader-election


def test_election_data_file():
    assert leader_election.parse_election_data('{"partitions": [{"topic": "t", "partition": 1}]}') == [("t", 1)]
    for text, message in [("{", "Replica election data is empty"),
                          ('{"version": 1}', 'Replica election data is missing "partitions" field'),
                          ('{"partitions": [{"topic": "t", "partition": 1}, {"topic": "t", "partition": 1}]}',
                           r"Replica election data contains duplicate partitions: \[t-1\]"),
                          ('{"partitions": [{"topic": "t"}]}', "needs a")]:
        with pytest.raises(CliError, match=message):
            leader_election.parse_election_data(text)


@pytest.mark.parametrize("argv,message", [
    ([], "Missing required option(s): bootstrap-server, election-type"),
    (["--bootstrap-server", "x:1", "--election-type", "preferred", "--topic", "t"],
     "Missing required option(s): partition"),
    (["--bootstrap-server", "x:1", "--election-type", "preferred", "--all-topic-partitions", "--partition", "1"],
     "Option partition is only allowed if topic is used"),
    (["--bootstrap-server", "x:1", "--election-type", "preferred", "--all-topic-partitions", "--topic", "t",
      "--partition", "0"], "One and only one of the following options is required: topic, all-topic-partitions, "
                           "path-to-json-file"),
    (["--bootstrap-server", "x:1", "--election-type", "sometimes", "--all-topic-partitions"],
     "Value [sometimes] is not one of [PREFERRED, UNCLEAN]"),
])
def test_leader_election_argument_checks(run, argv, message):
    status, _, err = run(leader_election.main, *argv)
    assert status == 1 and message in err


class FakeError:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text


def test_election_report(capsys):
    results = {("t", 1): None, ("t", 0): None, ("t", 2): FakeError("ELECTION_NOT_NEEDED", "not needed"),
               ("u", 0): FakeError("PREFERRED_LEADER_NOT_AVAILABLE", "The preferred leader was not available.")}
    assert leader_election.report("PREFERRED", results) == 1
    assert capsys.readouterr().out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
        "Valid replica already elected for partitions t-2",
        "Error completing leader election (PREFERRED) for partition: u-0: The preferred leader was not available.",
    ]


def test_zero_is_a_given_value(run):
    status, _, err = run(rp.main, "--bootstrap-server", "x:1", "--list", "--timeout", "0")
    assert status == 1 and 'Option "[timeout]" can\'t be used with action "[list]"' in err
