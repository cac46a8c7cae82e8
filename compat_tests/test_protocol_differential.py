"""Protocol differential against Apache Kafka 4.3.1 (issue 31, item 4): the same request sequences to a Kafka node
and a kbroker node, answers compared field by field (kbroker/testing/differential.py).

The test starts both brokers itself (same server properties, free loopback ports), whatever the session's target,
so it runs under every target. It runs the whole catalogue (every API key and version Kafka advertises, the
invalid sequences, the APIs Kafka refuses on its client listener: about 420 sequences, ~20 s once both brokers are
up) and fails on any difference that compat_tests/differential_allowed.json does not list with a reason.
``KBROKER_DIFF_REPORT=path`` keeps the JSON report.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kbroker.testing import config_diff as cd
from kbroker.testing import differential as d
from kbroker.testing import session_replay as sr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import config_diff as config_diff_script  # noqa: E402

ALLOW = Path(__file__).with_name("differential_allowed.json")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    try:
        from kbroker.testing.kafka import kafka_libs  # noqa: PLC0415

        kafka_libs()
    except RuntimeError as exc:
        pytest.fail(f"the reference Kafka's jars cannot be had: {exc}", pytrace=False)
    with d.BrokerPair(tmp_path_factory.mktemp("differential")) as p:
        yield p


def test_allow_list_is_well_formed() -> None:
    allow = d.load_allow_list(ALLOW)
    for e in allow.entries:
        assert set(e) <= {"sequence", "path", "reason"}, e
        assert len(e["reason"]) > 20, e


def test_protocol_differential(pair: d.BrokerPair) -> None:
    kafka, kbroker = pair.targets()
    allow = d.load_allow_list(ALLOW)
    report = d.differential(kafka, kbroker, allow, budget_s=240)
    if os.environ.get("KBROKER_DIFF_REPORT"):
        Path(os.environ["KBROKER_DIFF_REPORT"]).write_text(json.dumps(report.to_json(), indent=1, default=str))
    advertised = d.advertised_versions(kafka)
    covered = {r.seq.api_key for r in report.results if r.seq.kind == "valid"}
    assert covered >= set(advertised), f"API keys Kafka advertises with no sequence: {set(advertised) - covered}"
    fails = report.failures()
    shown = "\n".join(f"  {f['sequence']} step {f['step']} ({f['request']}): {f['path']}: kafka={f['kafka']!r} "
                      f"kbroker={f['kbroker']!r}" for f in fails[:60])
    assert not fails, (f"{len(fails)} differences from Kafka 4.3.1 not in {ALLOW.name} "
                       f"({len({f['sequence'] for f in fails})} sequences):\n{shown}")


def test_describe_configs_key_by_key(pair: d.BrokerPair) -> None:
    """DescribeConfigs per key against Kafka (kbroker/testing/config_diff.py): topics, the cluster-wide broker
    defaults, groups, client metrics and the root logger are identical; the broker's own configs differ only as
    docs/describe-configs.md says, and that page is what the two brokers answer today."""
    diffs = cd.compare(*pair.targets())
    for r in diffs:
        if r.label != "broker":
            assert not (r.differing or r.only_kafka or r.only_kbroker) and r.kafka_error == r.kbroker_error, r
    page = config_diff_script.generated_part(config_diff_script.DOCS.read_text())
    assert cd.markdown(diffs) == page, ("docs/describe-configs.md no longer says what Kafka and kbroker answer: "
                                        "run scripts/config_diff.py --write-docs and read the difference")


#: the clients whose recorded sessions are replayed (scripts/capture_frames.py drives each through a recording proxy)
REPLAY_CLIENTS = ("java", "confluent", "kafka-python", "aiokafka")


def test_recorded_client_sessions_replayed(pair: d.BrokerPair, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 31 item 4c: real clients' sessions (admin, idempotent and compressed produce, fetch, offsets), recorded
    through a proxy in front of a kbroker node, replayed request by request to Kafka and to kbroker with the ids
    each broker hands out (kbroker/testing/session_replay.py): every answer the same, or different only as the
    allow list documents."""
    import capture_frames  # noqa: PLC0415 - scripts/ (on sys.path above)

    recorder, versions = capture_frames.record(list(REPLAY_CLIENTS), tmp_path_factory.mktemp("sessions"))
    sessions: dict[str, list[sr.Recorded]] = {}
    for ex in recorder.exchanges:
        sessions.setdefault(ex.client, []).append(sr.Recorded(ex.api_key, ex.api_version, ex.request, ex.response,
                                                              ex.at))
    assert set(sessions) == set(REPLAY_CLIENTS), versions
    results = sr.replay(*pair.targets(), sessions, d.load_allow_list(ALLOW))
    summary = {r.client: (r.steps, r.identical, r.allowed) for r in results}
    for r in results:  # a replay that compared next to nothing would prove nothing
        assert r.compared == r.steps and r.steps >= 15 and r.identical >= r.steps // 2, summary
    fails = [f for r in results for f in r.differences]
    shown = "\n".join(f"  {f['client']} step {f['step']} ({f['request']}): {f['path']}: kafka={f['kafka']!r} "
                      f"kbroker={f['kbroker']!r}" for f in fails[:60])
    assert not fails, f"{len(fails)} differences from Kafka 4.3.1 in replayed sessions {summary}:\n{shown}"


@pytest.fixture(scope="module")
def auth_pair(tmp_path_factory: pytest.TempPathFactory):
    with d.AuthBrokerPair(tmp_path_factory.mktemp("differential-auth")) as p:
        yield p


def test_protocol_differential_without_authorization_and_bad_sasl(auth_pair: d.AuthBrokerPair) -> None:
    """Both brokers under Kafka's StandardAuthorizer with no ACLs: every valid sequence sent by ``alice`` (SASL/PLAIN,
    no ACLs) gets the same refusals (authorization errors, the fields a denied request still fills, closed
    connections), and authentication failures and misuse on the SASL listener are answered alike."""
    allow = d.load_allow_list(ALLOW)
    report = d.differential_denied(auth_pair, allow, budget_s=300)
    if os.environ.get("KBROKER_DIFF_REPORT"):
        Path(os.environ["KBROKER_DIFF_REPORT"] + ".auth.json").write_text(
            json.dumps(report.to_json(), indent=1, default=str))
    assert any(r.seq.kind == "denied" for r in report.results)
    assert sum(r.seq.kind == "sasl" for r in report.results) >= 15
    fails = report.failures()
    shown = "\n".join(f"  {f['sequence']} step {f['step']} ({f['request']}): {f['path']}: kafka={f['kafka']!r} "
                      f"kbroker={f['kbroker']!r}" for f in fails[:80])
    assert not fails, (f"{len(fails)} differences from Kafka 4.3.1 not in {ALLOW.name} "
                       f"({len({f['sequence'] for f in fails})} sequences):\n{shown}")
