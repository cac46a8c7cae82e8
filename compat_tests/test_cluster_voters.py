"""Controllers added and removed while the cluster runs (issue 9, KIP-853): three controllers and two brokers as
processes in a dynamic quorum (controller 1 formatted ``--standalone``, 2 and 3 added), a fourth controller started
as an observer, made a voter with ``kbroker-metadata-quorum add-controller`` (AddRaftVoter) and one of the first
three removed with ``remove-controller`` (RemoveRaftVoter), while confluent-kafka's AdminClient keeps creating
topics through the brokers.

Checked: DescribeQuorum shows the new voter (with the directory id from its ``meta.properties``) and then no
longer the removed one; the new voter counts for the majority (with the removed controller stopped and one more
of the original voters killed, CreateTopics still commits); every topic whose creation was acknowledged is in
the brokers' metadata, also after every process is restarted (the voters now come from the metadata log, not
from ``controller.quorum.voters``); bad requests get Kafka's errors (DUPLICATE_VOTER, VOTER_NOT_FOUND).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.config import parse_properties
from kbroker.testing.cluster import KbrokerCluster, wait_until

pytestmark = pytest.mark.timeout(400)

FAST_FENCING = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.metadata_quorum", *args], capture_output=True,
                          text=True, timeout=60)


def quorum_status(bootstrap: str) -> dict[str, str]:
    out = tool("--bootstrap-server", bootstrap, "describe", "--status")
    if out.returncode != 0:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.stdout.splitlines())}


def voter_ids(status: dict[str, str]) -> set[int]:
    import json

    return {v["id"] for v in json.loads(status.get("CurrentVoters", "[]"))}


def directory_id(node) -> str:
    return parse_properties((node.log_dirs / "meta.properties").read_text())["directory.id"]


class TopicCreator(threading.Thread):
    """Creates topics one after another until stopped; remembers the ones whose creation was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.created: list[str] = []
        self.failures = 0
        self.last_error = ""
        self.stopping = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set() and i < 3000:
            name = f"during-{i:03d}"
            try:
                self.admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name].result(20)
                self.created.append(name)
                i += 1
                time.sleep(0.05)
            except Exception as exc:  # noqa: BLE001 - a leader change: the same name again
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    self.created.append(name)
                    i += 1
                else:
                    self.failures += 1
                    self.last_error = str(exc)
                    time.sleep(0.2)


def test_add_a_fourth_controller_and_remove_one_while_topics_are_created(tmp_path):
    # a dynamic quorum (KIP-853): as Kafka, voters are added and removed only where kraft.version is 1; with
    # static voters (controller.quorum.voters) a controller outside them cannot even start
    cluster = KbrokerCluster(tmp_path, nodes=3, brokers=2, overrides=FAST_FENCING, dynamic_quorum=True)
    creator = None
    try:
        cluster.start()
        broker = cluster.nodes[4].bootstrap
        for i in (2, 3):
            cluster.add_voter(i)
        wait_until(lambda: voter_ids(quorum_status(broker)) == {1, 2, 3}, 30, "voters 1, 2 and 3")
        creator = TopicCreator(cluster.bootstrap)
        creator.start()

        node6 = cluster.add_controller(6)
        wait_until(lambda: "6" in quorum_status(broker).get("CurrentObservers", "").replace('"', "").replace(
            "{", " ").replace(":", " ").replace(",", " ").split(), 30, "controller 6 observing the quorum")
        props = cluster.properties_file(6)

        added = tool("--command-config", str(props), "--bootstrap-controller", cluster.nodes[1].bootstrap,
                     "add-controller")
        assert added.returncode == 0, added
        assert added.stdout.startswith(f"Added controller 6 with directory id {directory_id(node6)}"), added.stdout
        status = wait_until(lambda: (lambda s: s if voter_ids(s) == {1, 2, 3, 6} else None)(quorum_status(broker)),
                            30, "four voters")
        assert directory_id(node6) in status["CurrentVoters"]

        # through the active controller: Kafka's controllers answer AddRaftVoter NOT_LEADER_OR_FOLLOWER on a
        # follower (its admin client finds the leader first), where kbroker's forward it
        again = tool("--command-config", str(props), "--bootstrap-controller",
                     cluster.nodes[cluster.controller_id()].bootstrap, "add-controller")
        assert again.returncode != 0 and "DUPLICATE_VOTER" in again.stderr, again

        # remove controller 1 (through a broker: forwarded to the leader)
        removed = tool("--bootstrap-server", broker, "remove-controller", "--controller-id", "1",
                       "--controller-directory-id", directory_id(cluster.nodes[1]))
        assert removed.returncode == 0, removed
        wait_until(lambda: voter_ids(quorum_status(broker)) == {2, 3, 6}, 30, "voters 2, 3 and 6")
        gone = tool("--bootstrap-server", broker, "remove-controller", "--controller-id", "1",
                    "--controller-directory-id", directory_id(cluster.nodes[1]))
        assert gone.returncode != 0 and "VOTER_NOT_FOUND" in gone.stderr, gone
        cluster.nodes[1].stop()

        # the new voter counts: with 1 gone and one more original voter killed, 2 of {2, 3, 6} remain
        victim = 2 if cluster.controller_id(exclude=1) != 2 else 3
        cluster.kill(victim)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(lambda: _create(admin, "after-kill"), 60, f"CreateTopics committed by {5 - victim} and 6")
        done_before = len(creator.created)
        wait_until(lambda: len(creator.created) >= done_before + 5, 60,
                   f"the creator going on after killing {victim} ({creator.failures} failures, last error "
                   f"{creator.last_error})")
        creator.stopping.set()
        creator.join(60)
        assert len(creator.created) >= 10, (creator.created, creator.failures)

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(lambda: {*creator.created, "after-kill"} <= set(admin.list_topics(timeout=10).topics), 30,
                   "every acknowledged topic in the brokers' metadata")

        # everything restarted (controller 1 stays removed and stopped): the voters are the log's
        cluster.nodes[victim].start()
        for i in (5, 4, 3, 2, 6):
            if cluster.nodes[i].is_running():
                cluster.nodes[i].stop()
        for i in (2, 3, 6, 4, 5):
            cluster.nodes[i]._spawn()
        for i in (2, 3, 6, 4, 5):
            cluster.nodes[i].wait_ready(90)
        wait_until(lambda: voter_ids(quorum_status(broker)) == {2, 3, 6}, 60, "voters 2, 3 and 6 after restart")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(lambda: set(creator.created) <= set(admin.list_topics(timeout=10).topics), 60,
                   "every acknowledged topic after the restart")
    finally:
        if creator is not None:
            creator.stopping.set()
        cluster.stop()


def _create(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name].result(20)
        return True
    except Exception as exc:  # noqa: BLE001 - retried until the deadline
        return "TOPIC_ALREADY_EXISTS" in str(exc)


def test_a_dynamic_quorum_grows_from_one_standalone_controller(tmp_path):
    """``controller.quorum.bootstrap.servers`` and no static voters: controller 1 formatted ``--standalone`` is the
    only voter, controllers 2 and 3 (``--no-initial-controllers``) and the broker find the leader through the
    bootstrap server and follow; ``add-controller`` makes 2 and 3 voters (idle, the quorum commits NoOpRecords),
    after which the quorum survives the
    kill -9 of its leader, and a restart of every process keeps the three voters (they are in the log)."""
    cluster = KbrokerCluster(tmp_path, nodes=3, brokers=1, overrides=FAST_FENCING, dynamic_quorum=True)
    try:
        cluster.start()
        broker = cluster.nodes[4].bootstrap
        assert list((cluster.nodes[1].log_dirs / "__cluster_metadata-0").glob("*.checkpoint"))  # bootstrap voters
        status = wait_until(lambda: (lambda s: s if s and '"id": 2' in s.get("CurrentObservers", "")
                                     and '"id": 3' in s.get("CurrentObservers", "") else None)(quorum_status(broker)),
                            30, "controllers 2 and 3 observing")
        assert voter_ids(status) == {1}
        admin = AdminClient({"bootstrap.servers": broker})
        wait_until(lambda: _create(admin, "one-voter"), 30, "CreateTopics with one voter")

        for i in (2, 3):
            assert cluster.add_voter(i).startswith(f"Added controller {i} with directory id "
                                                   f"{directory_id(cluster.nodes[i])}")
        status = wait_until(lambda: (lambda s: s if voter_ids(s) == {1, 2, 3} else None)(quorum_status(broker)),
                            30, "three voters")
        for i in (1, 2, 3):
            assert directory_id(cluster.nodes[i]) in status["CurrentVoters"]
        # an idle quorum still commits: a NoOpRecord every metadata.max.idle.interval.ms (500 ms, KIP-835)
        before = int(quorum_status(broker)["HighWatermark"])
        wait_until(lambda: int(quorum_status(broker).get("HighWatermark", -1)) >= before + 2, 10,
                   "no-op records committed by an idle quorum")

        leader = cluster.controller_id()
        cluster.kill(leader)
        assert cluster.controller_id(timeout=30, exclude=leader) != leader
        wait_until(lambda: _create(admin, "after-failover"), 60, "CreateTopics after the leader's kill")

        cluster.nodes[leader].start()
        cluster.stop()
        cluster.start()
        wait_until(lambda: voter_ids(quorum_status(broker)) == {1, 2, 3}, 60, "three voters after the restart")
        admin = AdminClient({"bootstrap.servers": broker})
        wait_until(lambda: {"one-voter", "after-failover"} <= set(admin.list_topics(timeout=10).topics), 30,
                   "the topics after the restart")

        # a new controller with an empty log finds the leader through whichever bootstrap server it asks (a
        # follower names the leader and its endpoint in its answer) and becomes a voter
        cluster.add_controller(5)
        wait_until(lambda: '"id": 5' in quorum_status(broker).get("CurrentObservers", ""), 30, "controller 5")
        cluster.add_voter(5)
        wait_until(lambda: voter_ids(quorum_status(broker)) == {1, 2, 3, 5}, 30, "four voters")

        # controller 3 restarts on another port: it has the leader record its new endpoint (UpdateRaftVoter), so
        # the others reach it there (with the leader then killed, 3 of the 4 voters elect one and commit)
        from kbroker.testing.plugin import free_port

        cluster.nodes[3].stop()
        new_port = free_port(cluster.host)
        cluster.nodes[3].port = cluster.controller_ports[3] = new_port
        cluster.nodes[3].start()
        wait_until(lambda: f"CONTROLLER://127.0.0.1:{new_port}" in quorum_status(broker).get("CurrentVoters", ""),
                   30, "controller 3's new endpoint in the voter set")
        leader = cluster.controller_id()
        if leader != 3:
            cluster.kill(leader)
            assert cluster.controller_id(timeout=30, exclude=leader) != leader
        wait_until(lambda: _create(admin, "after-move"), 60, "CreateTopics with controller 3 on its new port")
    finally:
        cluster.stop()
