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
from pathlib import Path

import pytest

from kbroker.testing import differential as d

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
