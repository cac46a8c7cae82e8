"""Argument errors, unreachable brokers and the small parsers/formatters of the kbroker-* tools (offline)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from kbroker.cli import (
    acls,
    configs,
    console_consumer,
    console_producer,
    consumer_groups,
    consumer_perf,
    delete_records,
    leader_election,
    metadata_quorum,
    producer_perf,
    reassign_partitions,
    topics,
)
from kbroker.cli._common import CliError, kafka_table


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed


@pytest.mark.parametrize("main,argv,message", [
    (topics.main, ["--bootstrap-server", "x:1"], "exactly one action"),
    (topics.main, ["--bootstrap-server", "x:1", "--list", "--create"], "exactly one action"),
    (topics.main, ["--list"], "bootstrap-server"),
    (topics.main, ["--bootstrap-server", "x:1", "--create"], "[topic]"),
    (topics.main, ["--bootstrap-server", "x:1", "--alter", "--topic", "t"], "[partitions]"),
    (topics.main, ["--bootstrap-server", "x:1", "--list", "--if-exists"], "if-exists"),
    (topics.main, ["--bootstrap-server", "x:1", "--create", "--topic", "t", "--partitions", "x"], "invalid int"),
    (configs.main, ["--bootstrap-server", "x:1", "--entity-type", "topics"], "exactly one action"),
    (configs.main, ["--bootstrap-server", "x:1", "--describe", "--entity-type", "nope"], "invalid choice"),
    (configs.main, ["--describe", "--entity-type", "topics"], "bootstrap"),
    (consumer_groups.main, ["--bootstrap-server", "x:1"], "exactly one action"),
    (consumer_groups.main, ["--bootstrap-server", "x:1", "--describe"], "[group]"),
    (consumer_groups.main, ["--bootstrap-server", "x:1", "--reset-offsets", "--group", "g", "--topic", "t"],
     "exactly one of"),
    (consumer_groups.main, ["--bootstrap-server", "x:1", "--reset-offsets", "--group", "g", "--to-earliest"],
     "reset scopes"),
    (consumer_groups.main, ["--bootstrap-server", "x:1", "--delete-offsets", "--group", "g"], "[topic]"),
    (console_producer.main, ["--bootstrap-server", "x:1"], "--topic"),
    (console_consumer.main, ["--bootstrap-server", "x:1"], "include/topic"),
    (console_consumer.main, ["--bootstrap-server", "x:1", "--topic", "t", "--offset", "3"], "partition is required"),
    (console_consumer.main, ["--bootstrap-server", "x:1", "--topic", "t", "--partition", "0", "--offset", "-5"],
     "offset value"),
    (producer_perf.main, ["--topic", "t", "--num-records", "1", "--throughput", "-1"], "--record-size"),
    (producer_perf.main, ["--topic", "t", "--num-records", "1", "--record-size", "1"], "--throughput"),
    (consumer_perf.main, ["--bootstrap-server", "x:1", "--topic", "t"], "--messages"),
    (delete_records.main, ["--bootstrap-server", "x:1"], "--offset-json-file"),
    (metadata_quorum.main, ["--bootstrap-server", "x:1"], "describe"),
    (metadata_quorum.main, ["--bootstrap-server", "x:1", "describe"], "--status"),
    (leader_election.main, ["--bootstrap-server", "x:1"], "Missing required option(s): election-type"),
    (leader_election.main, ["--bootstrap-server", "x:1", "--election-type", "preferred"], "One and only one"),
    (reassign_partitions.main, ["--bootstrap-server", "x:1"], "exactly one action"),
    (reassign_partitions.main, ["--bootstrap-server", "x:1", "--execute"], '"[reassignment-json-file]"'),
    (acls.main, ["--bootstrap-server", "x:1"], "one of the arguments --add --remove --list is required"),
    (acls.main, ["--bootstrap-server", "x:1", "--list", "--resource-pattern-type", "wild"], "invalid choice"),
])
def test_bad_arguments_exit_1_with_a_message(run, main, argv, message):
    status, out, err = run(main, *argv)
    assert status == 1
    assert message in err
    assert "usage:" in err


@pytest.mark.parametrize("main,argv", [
    (topics.main, ["--list"]),
    (configs.main, ["--describe", "--entity-type", "topics", "--entity-name", "t"]),
    (consumer_groups.main, ["--list"]),
    (metadata_quorum.main, ["describe", "--status"]),
    (delete_records.main, ["--offset-json-file", "{json}"]),
    (reassign_partitions.main, ["--list"]),
    (leader_election.main, ["--election-type", "preferred", "--all-topic-partitions"]),
    (acls.main, ["--list"]),
])
def test_unreachable_broker_fails_fast_with_a_clear_error(run, tmp_path, monkeypatch, main, argv):
    monkeypatch.setenv("KBROKER_CLI_TIMEOUT_S", "3")
    json_file = tmp_path / "o.json"
    json_file.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 1}')
    argv = [a.replace("{json}", str(json_file)) for a in argv]
    bootstrap = closed_port()
    t0 = time.monotonic()
    status, out, err = run(main, "--bootstrap-server", bootstrap, *argv)
    assert status == 1
    assert f"cannot reach a broker at {bootstrap}" in err
    assert time.monotonic() - t0 < 15


def test_console_tools_fail_fast_on_an_unreachable_broker(tmp_path):
    env_timeout = {"KBROKER_CLI_TIMEOUT_S": "3"}
    import os

    env = {**os.environ, **env_timeout}
    bootstrap = closed_port()
    for module, extra, stdin in (("console_producer", ["--topic", "t"], "a\n"),
                                 ("console_consumer", ["--topic", "t", "--max-messages", "1"], ""),
                                 ("producer_perf", ["--topic", "t", "--num-records", "1", "--record-size", "1",
                                                    "--throughput", "-1"], ""),
                                 ("consumer_perf", ["--topic", "t", "--messages", "1"], "")):
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", f"kbroker.cli.{module}", "--bootstrap-server", bootstrap, *extra],
                              input=stdin, capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 1, (module, proc.stdout, proc.stderr)
        assert f"cannot reach a broker at {bootstrap}" in proc.stderr, module
        assert time.monotonic() - t0 < 20, module


def test_kafka_table_layout():
    lines = kafka_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "CLIENT-ID"],
                        [["g", "a-much-longer-topic-name", 0, None, "c"], ["g", "t", 10, 5, "client"]],
                        [15, 15, 10, 15, 0])
    assert lines == [
        "GROUP           TOPIC                    PARTITION  CURRENT-OFFSET  CLIENT-ID",
        "g               a-much-longer-topic-name 0          -               c",
        "g               t                        10         5               client",
    ]


def test_add_config_syntax():
    assert configs.parse_add_config("a=1,b=[x,y],c = 3 ,d=", None) == {"a": "1", "b": "x,y", "c": "3", "d": ""}
    with pytest.raises(CliError, match="key=val"):
        configs.parse_add_config("a", None)


def test_topic_include_list():
    rx = topics.include_filter("'orders.*, payments'")  # quotes around the whole list are dropped
    assert [n for n in ["orders", "orders-eu", "payments", "payments2"] if rx.fullmatch(n)] == [
        "orders", "orders-eu", "payments"]


def test_durations_and_datetimes():
    assert consumer_groups.parse_duration("PT1H30M") == 5_400_000
    assert consumer_groups.parse_duration("P1DT0.5S") == 86_400_500
    assert consumer_groups.parse_duration("-PT10S") == -10_000
    with pytest.raises(CliError):
        consumer_groups.parse_duration("1h")
    assert consumer_groups.parse_datetime("2024-01-02T03:04:05.678Z") == 1704164645678
    assert consumer_groups.parse_datetime("2024-01-02T04:04:05.678+01:00") == 1704164645678
    assert consumer_groups.parse_datetime("2024-01-02T04:04:05.678+0100") == 1704164645678
    with pytest.raises(CliError):
        consumer_groups.parse_datetime("yesterday")


def test_line_reader():
    r = console_producer.LineReader({"parse.key": "true", "key.separator": ":", "parse.headers": "true",
                                     "null.marker": "NULL"})
    assert r.parse("h1:v1,h2\tk:v:w") == (b"k", b"v:w", [("h1", b"v1"), ("h2", None)])
    assert r.parse("h:x\tNULL:NULL") == (None, None, [("h", b"x")])
    with pytest.raises(CliError, match="No key separator found on line number 3"):
        r.parse("h:x\tnokey")
    lenient = console_producer.LineReader({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse("just a value") == (None, b"just a value", [])


class FakeMessage:
    def __init__(self, key, value, headers=None):
        self._k, self._v, self._h = key, value, headers

    def timestamp(self):
        return 1, 1700000000000

    def partition(self):
        return 2

    def offset(self):
        return 41

    def headers(self):
        return self._h

    def key(self):
        return self._k

    def value(self):
        return self._v


def test_default_message_formatter():
    f = console_consumer.Formatter({"print.key": "true", "print.timestamp": "true", "print.partition": "true",
                                    "print.offset": "true", "print.headers": "true", "key.separator": " | "})
    assert f.format(FakeMessage(b"k", b"v", [("a", b"1"), ("b", None)])) == (
        b"CreateTime:1700000000000 | Partition:2 | Offset:41 | a:1,b:null | k | v\n")
    plain = console_consumer.Formatter({})
    assert plain.format(FakeMessage(None, None)) == b"null\n"
    assert console_consumer.Formatter({"print.key": "true"}).format(FakeMessage(None, b"v")) == b"null\tv\n"


def test_delete_records_json():
    assert delete_records.parse_offsets('{"partitions":[{"topic":"t","partition":0,"offset":3}],"version":1}') == [
        ("t", 0, 3)]
    with pytest.raises(CliError, match="duplicate topic partitions: t-0"):
        delete_records.parse_offsets('{"partitions":[{"topic":"t","partition":0,"offset":3},'
                                     '{"topic":"t","partition":0,"offset":4}]}')
    with pytest.raises(CliError, match="version"):
        delete_records.parse_offsets('{"partitions":[],"version":2}')
    with pytest.raises(CliError, match="JSON"):
        delete_records.parse_offsets("{")


def test_codec_requests_check_security_configs(run, tmp_path):
    """The codec client takes TLS and SASL settings (compat_tests/test_tls.py and test_sasl.py use them against
    brokers); an unknown protocol, a SASL config without credentials and GSSAPI are refused up front."""
    cfg = tmp_path / "client.properties"
    cfg.write_text("security.protocol=SASL_TLS\n")
    status, _, err = run(metadata_quorum.main, "--bootstrap-server", closed_port(), "--command-config", cfg,
                         "describe", "--status")
    assert status == 1 and "unknown security.protocol=SASL_TLS" in err
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n")
    status, _, err = run(metadata_quorum.main, "--bootstrap-server", closed_port(), "--command-config", cfg,
                         "describe", "--status")
    assert status == 1 and "needs username and password" in err
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    status, _, err = run(metadata_quorum.main, "--bootstrap-server", closed_port(), "--command-config", cfg,
                         "describe", "--status")
    assert status == 1 and "sasl.mechanism=GSSAPI" in err


def _acl_args(*argv: str):  # noqa: ANN202
    args = acls.build_parser().parse_args(["--bootstrap-server", "x:1", *argv])
    acls.check_args(args)
    return args


def test_acls_producer_consumer_and_explicit_entries():
    got = acls.filter_to_entries(_acl_args("--add", "--allow-principal", "User:bob", "--producer", "--consumer",
                                           "--topic", "t", "--group", "g", "--transactional-id", "tx",
                                           "--idempotent"))
    bob = lambda *ops: {("User:bob", "*", op, "ALLOW") for op in ops}  # noqa: E731
    assert got == {("TOPIC", "t", "LITERAL"): bob("WRITE", "DESCRIBE", "CREATE", "READ"),
                   ("TRANSACTIONAL_ID", "tx", "LITERAL"): bob("WRITE", "DESCRIBE"),
                   ("CLUSTER", "kafka-cluster", "LITERAL"): bob("IDEMPOTENT_WRITE"),
                   ("GROUP", "g", "LITERAL"): bob("READ")}
    got = acls.filter_to_entries(_acl_args("--add", "--allow-principal", "User:a", "--deny-principal", "User:m",
                                           "--deny-host", "10.0.0.1", "--deny-host", "10.0.0.2", "--operation",
                                           "idempotent_write", "--cluster"))
    assert got == {("CLUSTER", "kafka-cluster", "LITERAL"): {
        ("User:a", "*", "IDEMPOTENT_WRITE", "ALLOW"), ("User:m", "10.0.0.1", "IDEMPOTENT_WRITE", "DENY"),
        ("User:m", "10.0.0.2", "IDEMPOTENT_WRITE", "DENY")}}
    # --remove without principals: every ACL of the resource; --operation defaults to All
    assert acls.filter_to_entries(_acl_args("--remove", "--topic", "t", "--resource-pattern-type", "match")) == {
        ("TOPIC", "t", "MATCH"): set()}
    assert acls.filter_to_entries(_acl_args("--add", "--allow-principal", "User:a", "--topic", "t")) == {
        ("TOPIC", "t", "LITERAL"): {("User:a", "*", "ALL", "ALLOW")}}
    assert acls.block("Current ACLs for resource `x`:", [("User:a", "*", "READ", "ALLOW")]) == (
        "Current ACLs for resource `x`: \n \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW) \n")


@pytest.mark.parametrize("argv,message", [
    (["--list", "--producer", "--topic", "t"], "Option --list does not take --producer or --consumer"),
    (["--add", "--producer", "--allow-principal", "User:a"], "With --producer you must specify a --topic"),
    (["--add", "--idempotent", "--topic", "t"], "The --idempotent option is only available if --producer is set"),
    (["--add", "--consumer", "--topic", "t", "--group", "g", "--cluster"], "no --cluster or --transactional-id"),
    (["--add", "--topic", "t", "--resource-pattern-type", "any"], "'ANY' is not valid when adding acls"),
    (["--remove", "--principal", "User:a", "--topic", "t"], "only available if --list is set"),
])
def test_acls_argument_checks(argv, message):
    with pytest.raises(CliError, match=message):
        _acl_args(*argv)
    with pytest.raises(CliError, match="Invalid operation name Fly"):
        acls.filter_to_entries(_acl_args("--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"))


def test_configs_quota_entities_pair_types_and_names_in_order():
    def entity(*argv):
        p = configs.build_parser()
        return configs.quota_entities(p, p.parse_args(["--bootstrap-server", "x:1", "--describe", *argv]))

    assert entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default") == [("user", "alice"), ("client-id", None)]
    assert entity("--entity-type", "clients", "--entity-default", "--entity-type", "users", "--entity-name",
                  "bob") == [("client-id", None), ("user", "bob")]
    assert entity("--entity-type", "ips") == [("ip", ...)]
    assert entity("--user", "alice", "--client", "c1") == [("user", "alice"), ("client-id", "c1")]
    assert entity("--entity-type", "topics", "--entity-name", "t") is None
    with pytest.raises(SystemExit):
        entity("--entity-type", "users", "--entity-type", "ips")


def test_embedded_node_advertises_overridden_listeners() -> None:
    from kbroker.cli.main import embedded_props

    assert embedded_props({})["advertised.listeners"] == "PLAINTEXT://localhost:9092"
    props = embedded_props({"listeners": "PLAINTEXT://127.0.0.1:9093"})
    assert "advertised.listeners" not in props  # defaults to the listeners, as Kafka
    props = embedded_props({"listeners": "PLAINTEXT://0.0.0.0:9093", "advertised.listeners": "PLAINTEXT://h:9093"})
    assert props["advertised.listeners"] == "PLAINTEXT://h:9093"
