"""Client quotas (KIP-13/55/219/546) and connection creation rates (KIP-612) with real clients: quotas set with
kbroker-configs and the Java AdminClient, survive a restart, and hold confluent-kafka producers and consumers (and
the Java producer) to their byte rates while an unthrottled client beside them keeps its throughput."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing.plugin import current_target

pytestmark = pytest.mark.timeout(300)

MIB = 1024 * 1024
#: The throughput tests' brokers keep 2 one-second samples (quota.window.num). A client that takes all it may
#: bursts about (quota.window.num - 1) seconds worth of its quota whenever the oldest sample expires, and is then
#: throttled until that sample expires (Kafka's Rate, which kbroker follows, assumes the windows before the first
#: recording were empty): with Kafka's default of 11 samples that is a 10 s burst every 11 s or so, and an average
#: over 20 s lands 10-20 % off the quota depending on where the bursts fall; with 2 the bursts come every 2 s.
QUOTA_WINDOW = {"quota.window.num": "2"}


def configs(bootstrap: str, *args: Any, ok: bool = True) -> subprocess.CompletedProcess:
    """Run ``kbroker-configs`` as a user would."""
    proc = subprocess.run([sys.executable, "-m", "kbroker.cli.configs", "--bootstrap-server", bootstrap,
                           *map(str, args)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KBROKER_CLI_TIMEOUT_S": "15"})
    if ok:
        assert proc.returncode == 0, f"kbroker-configs {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(30)


# --------------------------------------------------------------------------------- admin: tool and Java client

def test_kbroker_configs_sets_describes_and_deletes_quotas_and_they_survive_restart(kbroker_factory):
    broker = kbroker_factory()
    b = broker.bootstrap
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "c1",
            "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    out = configs(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default", "--add-config", "request_percentage=50").stdout
    assert out.strip() == "Completed updating config for user alice."
    configs(b, "--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=5000")
    configs(b, "--alter", "--entity-type", "ips", "--entity-name", "10.0.0.1",
            "--add-config", "connection_creation_rate=5")
    # quotas and SCRAM credentials in one --add-config, as kafka-configs.sh takes them
    configs(b, "--alter", "--entity-type", "users", "--entity-name", "bob",
            "--add-config", "producer_byte_rate=1000,SCRAM-SHA-256=[iterations=4096,password=bob-secret]")

    def describe(*args: str) -> list[str]:
        return configs(b, "--describe", *args).stdout.strip().splitlines()

    def check_all() -> None:
        assert describe("--entity-type", "clients") == [
            "Quota configs for client-id 'c1' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0"]
        assert describe("--entity-type", "users", "--entity-name", "bob") == [
            "Quota configs for user-principal 'bob' are producer_byte_rate=1000.0",
            "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096"]
        assert describe("--entity-type", "users", "--entity-default") == [
            "Quota configs for the default user-principal are producer_byte_rate=5000.0"]
        assert describe("--entity-type", "users", "--entity-type", "clients") == [
            "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.0"]
        assert describe("--entity-type", "ips") == [
            "Quota configs for ip '10.0.0.1' are connection_creation_rate=5.0"]

    check_all()
    broker.restart()  # replayed from the metadata log
    check_all()

    # Kafka's checks and the controller's messages
    bad = configs(b, "--alter", "--entity-type", "ips", "--entity-name", "10.0.0.1",
                  "--add-config", "producer_byte_rate=1", ok=False)
    assert bad.returncode != 0 and "Unexpected config names: producer_byte_rate" in bad.stderr
    bad = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "c1",
                  "--add-config", "producer_byte_rate=1.5", ok=False)
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in bad.stderr

    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "c1", "--delete-config", "producer_byte_rate")
    assert describe("--entity-type", "clients", "--entity-name", "c1") == [
        "Quota configs for client-id 'c1' are consumer_byte_rate=2097152.0"]
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "c1", "--delete-config", "consumer_byte_rate")
    assert describe("--entity-type", "clients") == []


def test_java_admin_client_alters_and_describes_client_quotas(kafka_broker, java_driver):
    b = kafka_broker.bootstrap
    java_driver.run(["admin", "alter-client-quotas", "--bootstrap", b, "--entity", "user=jq-user",
                     "--entity", "client-id=jq-client", "--set", "producer_byte_rate=2048",
                     "--set", "controller_mutation_rate=10.5"])
    java_driver.run(["admin", "alter-client-quotas", "--bootstrap", b, "--entity", "client-id=<default>",
                     "--set", "consumer_byte_rate=4096"])
    # validate_only writes nothing
    java_driver.run(["admin", "alter-client-quotas", "--bootstrap", b, "--entity", "client-id=jq-only",
                     "--set", "consumer_byte_rate=1", "--validate-only", "true"])
    ev = java_driver.one(java_driver.run(["admin", "describe-client-quotas", "--bootstrap", b,
                                          "--entity", "user=jq-user", "--entity", "client-id=*"]), "client-quotas")
    assert ev["entries"] == [{"entity": {"client-id": "jq-client", "user": "jq-user"},
                              "values": {"controller_mutation_rate": 10.5, "producer_byte_rate": 2048.0}}]
    ev = java_driver.one(java_driver.run(["admin", "describe-client-quotas", "--bootstrap", b,
                                          "--entity", "client-id=<default>", "--strict", "true"]), "client-quotas")
    assert ev["entries"] == [{"entity": {"client-id": "<default>"}, "values": {"consumer_byte_rate": 4096.0}}]
    ev = java_driver.one(java_driver.run(["admin", "describe-client-quotas", "--bootstrap", b,
                                          "--entity", "client-id=jq-only"]), "client-quotas")
    assert ev["entries"] == []
    # an ip entity cannot take a byte rate: INVALID_REQUEST with Kafka's message
    events = java_driver.run(["admin", "alter-client-quotas", "--bootstrap", b, "--entity", "ip=127.0.0.1",
                              "--set", "producer_byte_rate=1"], check=False)
    err = java_driver.one(events, "error")
    assert err["error_class"] == "InvalidRequestException"
    assert "Invalid configuration key producer_byte_rate" in err["message"]
    events = java_driver.run(["admin", "describe-client-quotas", "--bootstrap", b, "--entity", "ip=*",
                              "--entity", "user=*"], check=False)
    assert java_driver.one(events, "error")["error_class"] == "InvalidRequestException"
    # clean up the session broker's quotas
    for ent in (["--entity", "user=jq-user", "--entity", "client-id=jq-client", "--remove", "producer_byte_rate",
                 "--remove", "controller_mutation_rate"],
                ["--entity", "client-id=<default>", "--remove", "consumer_byte_rate"]):
        java_driver.run(["admin", "alter-client-quotas", "--bootstrap", b, *ent])
    ev = java_driver.one(java_driver.run(["admin", "describe-client-quotas", "--bootstrap", b]), "client-quotas")
    assert ev["entries"] == []


# --------------------------------------------------------------------------------- enforcement

class Loader(threading.Thread):
    """A confluent-kafka producer sending 16 KiB records as fast as it can (or at ``target`` bytes/s at most);
    ``acked`` holds (time, bytes) per delivered record."""

    def __init__(self, conf: dict[str, Any], topic: str, target: float | None = None) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.producer = Producer({"linger.ms": 5, "batch.size": 262144, "acks": 1, **conf})
        self.topic = topic
        self.acked: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.throttle_events: list[int] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((time.monotonic(), len(msg.value())))

    def run(self) -> None:
        payload = os.urandom(16384)
        t0, sent = time.monotonic(), 0
        while not self.stop.is_set():
            if self.target is not None and sent > self.target * (time.monotonic() - t0):
                self.producer.poll(0.005)
                continue
            try:
                self.producer.produce(self.topic, payload, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.05)
                continue
            sent += len(payload)
            self.producer.poll(0)
        self.producer.flush(30)

    def rate(self, start: float, end: float) -> float:
        """Bytes/s delivered between ``start`` and ``end`` (monotonic)."""
        return sum(n for t, n in self.acked if start <= t < end) / (end - start)


def run_for(loaders: list[Loader], seconds: float, skip: float = 0.0) -> list[float]:
    """Run ``loaders`` together; their delivery rates over [skip, seconds]."""
    for ld in loaders:
        ld.start()
    t0 = time.monotonic()
    time.sleep(seconds)
    for ld in loaders:
        ld.stop.set()
    for ld in loaders:
        ld.join(60)
    return [ld.rate(t0 + skip, t0 + seconds) for ld in loaders]


def test_producer_byte_rate_holds_one_producer_while_another_keeps_its_throughput(kbroker_factory):
    broker = kbroker_factory(overrides=QUOTA_WINDOW)
    b = broker.bootstrap
    create_topic(b, "quota-produce", 2)
    # the unthrottled producer sends 20 MiB/s (what a loaded 2-core machine sustains beside the other clients):
    # alone, then beside the throttled one
    fast_conf = {"bootstrap.servers": b, "client.id": "fast"}
    (alone,) = run_for([Loader(fast_conf, "quota-produce", 20 * MIB)], 6, skip=1)
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "slow",
            "--add-config", f"producer_byte_rate={MIB}")
    slow = Loader({"bootstrap.servers": b, "client.id": "slow"}, "quota-produce")
    fast = Loader(fast_conf, "quota-produce", 20 * MIB)
    # the first seconds can burst (QUOTA_WINDOW): the 20 s measured start once the samples are full
    slow_rate, fast_rate = run_for([slow, fast], 24, skip=4)
    print(f"alone {alone / MIB:.1f} MiB/s; together: slow {slow_rate / MIB:.3f} MiB/s, fast {fast_rate / MIB:.1f} "
          f"MiB/s")
    assert alone > 10 * MIB, "the unthrottled producer is too slow for the comparison to mean anything"
    # record payload is what the client sees; the quota counts whole requests (headers, batch overhead: ~1 %)
    assert 0.9 * MIB <= slow_rate <= 1.1 * MIB
    assert fast_rate >= 0.8 * alone


def test_consumer_byte_rate_holds_a_consumer(kbroker_factory):
    broker = kbroker_factory(overrides=QUOTA_WINDOW)
    b = broker.bootstrap
    create_topic(b, "quota-fetch")
    p = Producer({"bootstrap.servers": b, "linger.ms": 5, "batch.size": 65536})  # fetches of 64 KiB
    payload = os.urandom(16384)
    for _ in range(2400):  # 37.5 MiB
        while True:
            try:
                p.produce("quota-fetch", payload)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "slow-consumer",
            "--add-config", f"consumer_byte_rate={MIB}")

    def consume(client_id: str, seconds: float, skip: float) -> float:
        c = Consumer({"bootstrap.servers": b, "group.id": client_id, "client.id": client_id,
                      "auto.offset.reset": "earliest", "fetch.max.bytes": 65536, "message.max.bytes": 32768,
                      "max.partition.fetch.bytes": 65536})
        c.assign([TopicPartition("quota-fetch", 0, 0)])
        got: list[tuple[float, int]] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append((time.monotonic(), len(m.value())))
        c.close()
        per = [sum(n for t, n in got if t0 + i <= t < t0 + i + 1) / MIB for i in range(int(seconds))]
        print(client_id, "MiB per second:", " ".join(f"{x:.2f}" for x in per))
        return sum(n for t, n in got if t >= t0 + skip) / (seconds - skip)

    fast = consume("fast-consumer", 3, 0)
    slow = consume("slow-consumer", 24, 4)
    print(f"fast consumer {fast / MIB:.1f} MiB/s, slow consumer {slow / MIB:.3f} MiB/s")
    assert fast > 4 * MIB
    # at most the quota (whole responses are counted, so a little over), and held near it: Kafka's broker, which
    # throttles after answering, lands some 25 % under it on this load
    assert 0.6 * MIB <= slow <= 1.1 * MIB


def test_user_quota_holds_a_sasl_plain_user_and_not_another(kbroker_factory):
    from compat_tests.test_sasl import rdkafka_conf, sasl_broker

    broker, sasl = sasl_broker(kbroker_factory, QUOTA_WINDOW)
    create_topic(broker.bootstrap, "quota-user")
    configs(broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--add-config", f"producer_byte_rate={MIB // 2}")
    alice = Loader(rdkafka_conf(sasl, "alice", "alice-secret"), "quota-user")
    admin = Loader(rdkafka_conf(sasl, "admin", "admin-secret"), "quota-user")
    alice_rate, admin_rate = run_for([alice, admin], 14, skip=4)
    print(f"alice {alice_rate / MIB:.3f} MiB/s, admin {admin_rate / MIB:.1f} MiB/s")
    assert alice_rate <= 0.5 * MIB * 1.25
    assert admin_rate > 2 * MIB


def test_java_producer_honours_throttle_time(kbroker_factory, java_driver):
    import urllib.request

    from kbroker.testing.plugin import free_port

    metrics_port = free_port()
    broker = kbroker_factory(start=False)
    if broker.target == "kbroker":  # kbroker's own Prometheus endpoint
        broker.overrides.update({"metrics.port": str(metrics_port), "metrics.host": "127.0.0.1"})
    broker.start()
    b = broker.bootstrap
    create_topic(b, "quota-java")
    configs(b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "producer_byte_rate=200000")
    t0 = time.monotonic()
    # 4 MB at 200 kB/s: the first ~2 MB pass (the rate assumes 10 quiet seconds before the first sample), the
    # rest waits for the window
    events = java_driver.run(["produce", "--bootstrap", b, "--topic", "quota-java", "--count", "250",
                              "--pad", "16000", "--batch-size", "65536"], timeout=120)
    took = time.monotonic() - t0
    done = java_driver.one(events, "done")
    print(f"java producer: 4 MB took {took:.1f} s, produce-throttle-time-max {done['produce_throttle_time_max']} ms")
    assert done["acked"] == 250
    assert done["produce_throttle_time_max"] > 0  # the client read throttle_time_ms (KIP-219)
    assert took >= 8
    if broker.target != "kbroker":
        return
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    line = next(x for x in text.splitlines() if x.startswith("kafka_server_produce_throttle_time_ms_total{"))
    assert 'client_id="kbroker-compat-java-producer"' in line and float(line.split()[-1]) > 1000


# --------------------------------------------------------------------------------- connection creation rate

def connect_all(bootstrap: str, n: int) -> tuple[list[socket.socket], list[float]]:
    """Open ``n`` connections and send an ApiVersions on each; the seconds until each is answered."""
    from kbroker.protocol import codec
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import ApiVersionsRequest

    host, port = bootstrap.rsplit(":", 1)
    body = encode_request_header(18, 0, 1, "rate") + codec.encode(ApiVersionsRequest(), 0)
    frame = len(body).to_bytes(4, "big") + body
    socks = []
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(frame)
        socks.append(s)
    answered = []
    for s in socks:
        s.recv(4)
        answered.append(time.monotonic() - t0)
    return socks, answered


def client_listener_broker(kbroker_factory, overrides: dict[str, str]) -> tuple[Any, str]:
    """A broker with a CLIENT listener besides PLAINTEXT, the inter-broker listener (which KIP-612 leaves out of
    the broker-wide max.connection.creation.rate)."""
    from kbroker.testing.plugin import free_port

    broker = kbroker_factory(start=False)
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},CLIENT://127.0.0.1:{port}"
    broker.overrides.update({"listeners": listeners, "advertised.listeners": listeners,
                             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                                               "CLIENT:PLAINTEXT", **overrides})
    broker.start()
    return broker, f"127.0.0.1:{port}"


def test_max_connection_creation_rate_spaces_out_accepts(kbroker_factory):
    # QUOTA_WINDOW: Kafka measures connection rates with its Rate over quota.window.num samples, which lets
    # (quota.window.num - 1) windows' worth of connections through at once (100 here with the default 11)
    broker, client = client_listener_broker(kbroker_factory, {"max.connection.creation.rate": "10", **QUOTA_WINDOW})
    # the inter-broker listener is exempt
    socks, answered = connect_all(broker.bootstrap, 30)
    for s in socks:
        s.close()
    assert answered[-1] < 2
    socks, answered = connect_all(client, 50)
    try:
        print(f"50 connections answered after {answered[-1]:.2f} s (first {answered[0]:.2f} s)")
        assert answered[-1] >= 3.5
        assert answered[-1] <= 12
    finally:
        for s in socks:
            s.close()
    # a dynamic broker config changes it without a restart
    configs(broker.bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", "max.connection.creation.rate=100000")
    time.sleep(2.5)  # and the burst above leaves the 2 samples
    socks, answered = connect_all(client, 50)
    for s in socks:
        s.close()
    assert answered[-1] < 2


def test_listener_connection_creation_rate(kbroker_factory):
    # QUOTA_WINDOW: see test_max_connection_creation_rate_spaces_out_accepts
    broker, client = client_listener_broker(kbroker_factory,
                                            {"listener.name.client.max.connection.creation.rate": "20",
                                             **QUOTA_WINDOW})
    socks, answered = connect_all(client, 60)
    try:
        print(f"60 connections at 20/s answered after {answered[-1]:.2f} s")
        assert 2.0 <= answered[-1] <= 8
    finally:
        for s in socks:
            s.close()


def test_ip_connection_creation_rate_quota_closes_connections_over_it(kbroker_factory):
    broker = kbroker_factory(overrides=QUOTA_WINDOW)  # see test_max_connection_creation_rate_spaces_out_accepts
    b = broker.bootstrap
    configs(b, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
            "--add-config", "connection_creation_rate=5")
    time.sleep(0.5)
    from kbroker.protocol import codec
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import ApiVersionsRequest

    host, port = b.rsplit(":", 1)
    body = encode_request_header(18, 0, 1, "rate") + codec.encode(ApiVersionsRequest(), 0)
    frame = len(body).to_bytes(4, "big") + body
    ok = closed = 0
    socks = []
    for _ in range(30):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(frame)
        socks.append(s)
    for s in socks:
        try:
            data = s.recv(4)
        except (ConnectionResetError, socket.timeout):
            data = b""
        if data:
            ok += 1
        else:
            closed += 1
        s.close()
    print(f"ip quota 5/s: {ok} answered, {closed} closed")
    assert closed >= 10 and 1 <= ok <= 20
    # other addresses are not limited: the default ip has no quota (127.0.0.2 is loopback too)
    s = socket.create_connection((host, int(port)), timeout=5, source_address=("127.0.0.2", 0))
    s.sendall(frame)
    assert s.recv(4)
    s.close()
    # removed: back to unlimited (once the window lets the tool's own connection in)
    time.sleep(2.5)
    configs(b, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
            "--delete-config", "connection_creation_rate")
    time.sleep(0.5)
    socks, answered = connect_all(b, 30)
    for s in socks:
        s.close()
    assert len(answered) == 30


# --------------------------------------------------------------------------------- controller mutations (KIP-599)

def test_controller_mutation_rate_throttles_topic_creation(kbroker_factory):
    """1 partition/s: a bucket of 11 tokens (controller.quota.window.num x 1 s). CreateTopics v7 that takes it below
    0 is let through unthrottled (a strict quota); the next gets THROTTLING_QUOTA_EXCEEDED (no message) with a
    throttle time; v5 (before KIP-599) is let through and throttled."""
    from kbroker.cli._wire import WireClient
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import CreateTopicsRequest as Req, DeleteTopicsRequest

    broker = kbroker_factory()
    b = broker.bootstrap
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "mutator",
            "--add-config", "controller_mutation_rate=1")

    def create(name: str, partitions: int, version: int, client_id: str = "mutator") -> Any:
        # a new connection each time: the broker stops reading from a connection for its throttle time (KIP-219)
        req = Req(topics=[Req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
                  timeout_ms=10000)
        with WireClient(b, client_id=client_id) as wire:
            return wire.any_broker().send(req, version)

    first = create("m1", 10, 7)  # 11 tokens -> 1
    assert first.topics[0].error_code == ErrorCode.NONE and first.throttle_time_ms == 0
    second = create("m2", 10, 7)  # 1 -> -9: accepted, and (strict) not throttled
    assert second.topics[0].error_code == ErrorCode.NONE and second.throttle_time_ms == 0
    third = create("m3", 1, 7)  # below 0: refused, throttled until the bucket is back at 0 (about 9 s)
    assert third.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert third.topics[0].error_message is None
    assert 5000 < third.throttle_time_ms <= 9500
    old = create("m4", 1, 5)  # no THROTTLING_QUOTA_EXCEEDED before v6: created, and throttled
    assert old.topics[0].error_code == ErrorCode.NONE and old.throttle_time_ms > 5000
    with WireClient(b, client_id="mutator") as wire:
        deleted = wire.any_broker().send(DeleteTopicsRequest(topic_names=["m1"], timeout_ms=10000), 5)
    assert deleted.responses[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert create("m5", 20, 7, client_id="another").topics[0].error_code == ErrorCode.NONE  # not limited


# --------------------------------------------------------------------------------- authorization and a cluster

@pytest.mark.kafka_reference
def test_client_quota_apis_need_cluster_configs_permissions(kbroker_factory):
    """AlterClientQuotas needs ALTER_CONFIGS and DescribeClientQuotas DESCRIBE_CONFIGS on the cluster: with
    StandardAuthorizer and no ACL, User:ANONYMOUS (not a super user) has neither."""
    broker = kbroker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    out = configs(broker.bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "c1",
                  "--add-config", "producer_byte_rate=1", ok=False)
    assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out.stderr, out  # Kafka sends no message
    out = configs(broker.bootstrap, "--describe", "--entity-type", "clients", ok=False)
    assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out.stderr, out  # Kafka sends no message


def test_cluster_quotas_altered_through_a_standby_reach_every_node_and_survive_a_restart(tmp_path):
    from kbroker.protocol.messages import AlterClientQuotasRequest as Req
    from kbroker.protocol.messages import AlterClientQuotasResponse as Resp
    from kbroker.protocol.messages import DescribeClientQuotasRequest as DReq
    from kbroker.protocol.messages import DescribeClientQuotasResponse as DResp
    from kbroker.testing.cluster import KbrokerCluster, ask, wait_every_node

    def described(node: int) -> dict[Any, Any]:
        resp = ask(cluster.host, cluster.nodes[node].port, 48, 1, DReq(components=[], strict=False), DResp)
        assert resp.error_code == 0, resp
        return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                {v.key: v.value for v in entry.values} for entry in resp.entries}

    cluster = KbrokerCluster(tmp_path, nodes=3)
    try:
        cluster.start()
        active = cluster.controller_id()
        standby = next(i for i in cluster.broker_ids if i != active)
        req = Req(entries=[Req.EntryData(entity=[Req.EntityData(entity_type="client-id", entity_name="c1")],
                                         ops=[Req.OpData(key="producer_byte_rate", value=1024.0)]),
                           Req.EntryData(entity=[Req.EntityData(entity_type="ip", entity_name=None)],
                                         ops=[Req.OpData(key="producer_byte_rate", value=1.0)])])
        resp = ask(cluster.host, cluster.nodes[standby].port, 49, 1, req, Resp, timeout=20)
        assert [(e.error_code, e.error_message) for e in resp.entries] == [
            (0, None), (42, "Invalid configuration key producer_byte_rate")]
        want = {(("client-id", "c1"),): {"producer_byte_rate": 1024.0}}
        wait_every_node(cluster.broker_ids, described, want)
        cluster.stop()
        cluster.start()
        wait_every_node(cluster.broker_ids, described, want)
    finally:
        cluster.stop()


def _request_quota_broker(kbroker_factory) -> tuple[Any, Callable[..., tuple[int, float]]]:
    """A broker where client id ``busy`` has request_percentage=0.001, and a Metadata round trip on a new connection
    (each asked on a new connection: the broker reads nothing from a throttled one for the throttle time)."""
    from kbroker.protocol import codec
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import MetadataRequest, MetadataResponse

    # a request-time throttle is at most one sample window (quota.window.size.seconds: 1 s), as Kafka bounds it
    broker = kbroker_factory(overrides={"quota.window.num": "2"})
    b = broker.bootstrap
    configs(b, "--alter", "--entity-type", "clients", "--entity-name", "busy", "--add-config",
            "request_percentage=0.001")
    host, port = b.rsplit(":", 1)

    def metadata(client_id: str, version: int = 9) -> tuple[int, float]:
        """(throttle_time_ms, seconds until the answer)"""
        body = encode_request_header(3, version, 1, client_id) + codec.encode(MetadataRequest(topics=None), version)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            t0 = time.monotonic()
            sock.sendall(len(body).to_bytes(4, "big") + body)
            size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
            took = time.monotonic() - t0
            frame = sock.recv(size, socket.MSG_WAITALL)
        pos = codec._skip_tagged(frame, 4) if version >= 9 else 4
        resp, _ = codec.decode(MetadataResponse, frame, version, pos)
        return resp.throttle_time_ms, took

    return broker, metadata


def test_request_percentage_throttles_a_busy_client_only(kbroker_factory):
    """request_percentage counts the broker's time on a client's requests: a quota of 0.001 % of a thread is
    exceeded by the first requests, and their answers carry throttle_time_ms at once (KIP-219), at most one
    quota window; another client id is not throttled."""
    broker, metadata = _request_quota_broker(kbroker_factory)
    busy = [metadata("busy") for _ in range(5)]
    calm = [metadata("calm") for _ in range(5)]
    print("busy", busy, "calm", calm)
    assert all(0 < ms <= 1000 for ms, _ in busy[1:]) and all(took < 0.5 for _, took in busy)  # answered at once
    assert [ms for ms, _ in calm] == [0] * 5


@pytest.mark.xfail(condition=current_target() == "kbroker", strict=True,
                   reason="kbroker: holds back a throttled answer to a version before KIP-219 (Metadata v5) for the "
                          "throttle time; Kafka 4.3.1 sends it at once with throttle_time_ms")
def test_request_percentage_answers_an_old_version_at_once(kbroker_factory):
    """Metadata v5 (before KIP-219) from a client over its request_percentage: Kafka 4.3.1 answers at once, with the
    throttle time (one quota window) in the response."""
    broker, metadata = _request_quota_broker(kbroker_factory)
    for _ in range(3):
        metadata("busy")
    ms, took = metadata("busy", 5)
    print("v5", ms, took)
    assert 900 <= ms <= 1000 and took < 0.5
