"""Broker fencing when the active controller itself stalls (issue 33).

One controller and two brokers, ``broker.session.timeout.ms`` 3 s. The controller process is stopped (SIGSTOP)
for longer than the session timeout while the brokers keep sending BrokerHeartbeat: their heartbeats wait
unread in the controller's sockets. When it runs again those heartbeats must count before any session expires
(Kafka's controller applies queued heartbeats before its session check), so no broker is fenced; a broker that
really stops is still fenced after its session.
"""

from __future__ import annotations

import time

import pytest

from kbroker.testing.cluster import KbrokerCluster, metadata_brokers, wait_until

pytestmark = pytest.mark.timeout(300)

FAST_FENCING = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture
def cluster(tmp_path):
    c = KbrokerCluster(tmp_path, nodes=1, brokers=2, overrides=FAST_FENCING)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.kbroker_only("reads the controller's log for fencing decisions")
def test_a_stalled_controller_does_not_fence_brokers_whose_heartbeats_wait_in_its_sockets(cluster):
    broker = cluster.nodes[2]
    wait_until(lambda: metadata_brokers(cluster.host, broker.port) == {2, 3}, 30, "both brokers registered")
    controller = cluster.nodes[1]
    mark = controller.log_size()
    cluster.pause(1)
    try:
        time.sleep(4.5)  # longer than the session timeout; the brokers heartbeat every 0.5 s meanwhile
    finally:
        cluster.resume(1)
    time.sleep(4)  # several fencing checks and heartbeat rounds after the stall
    text = controller.log_text()[mark:]
    assert "fencing broker" not in text, controller.log_tail(40, since=mark)
    assert "did not run for" in text, controller.log_tail(40, since=mark)  # the stall is reported
    assert metadata_brokers(cluster.host, broker.port) == {2, 3}

    # a broker that is really gone is still fenced after its session
    cluster.kill(3)
    start = time.monotonic()
    wait_until(lambda: metadata_brokers(cluster.host, broker.port) == {2}, 20, "broker 3 fenced")
    assert time.monotonic() - start >= 2.5
    assert "fencing broker 3" in controller.log_text()[mark:]
