"""The handlers' authorization helpers (kbroker/server/handlers/common.py) and ``authorize_any``
(kbroker/server/authorizer.py): what the authorizer is asked (principal, operation, resource, the client's IP
address), a request forwarded by a node with CLUSTER_ACTION, and the no-authorizer path."""

from __future__ import annotations

from types import SimpleNamespace

from kbroker.server.authorizer import AclOperation as Op, ResourceType as RT, authorize_any
from kbroker.server.handlers import common


class Recorder:
    """Allows what is in ``allowed`` ((principal, op, type, name) tuples) and records every question."""

    def __init__(self, allowed: set[tuple]) -> None:
        self.allowed = allowed
        self.asked: list[tuple] = []

    def authorize(self, principal, operation, resource_type, resource_name, host) -> bool:  # noqa: ANN001
        self.asked.append((principal, operation, resource_type, resource_name, host))
        return (principal, operation, resource_type, resource_name) in self.allowed


def ctx(authorizer, principal: str = "User:alice", client_id: str = "app"):  # noqa: ANN001, ANN201
    connection = SimpleNamespace(principal=principal, peer=("10.1.2.3", 40000))
    header = SimpleNamespace(client_id=client_id)
    broker = SimpleNamespace(authorizer=authorizer,
                             controller=SimpleNamespace(image=SimpleNamespace(topics_by_name={"a": 1, "b": 2})))
    return SimpleNamespace(broker=broker, connection=connection, header=header, client_id=client_id)


def test_without_an_authorizer_everything_is_allowed():
    c = ctx(None)
    assert common.authorize(c, Op.DELETE, RT.TOPIC, "t")
    assert common.authorized_names(c, Op.READ, RT.TOPIC, ["x", "y", "x"]) == {"x", "y"}
    assert not common.cluster_denied(c, Op.ALTER)
    assert common.authorize_any_topic(c, Op.WRITE)


def test_the_authorizer_is_asked_with_the_principal_and_the_client_address():
    rec = Recorder({("User:alice", Op.READ, RT.TOPIC, "t")})
    c = ctx(rec)
    assert common.authorize(c, Op.READ, RT.TOPIC, "t")
    assert not common.authorize(c, Op.WRITE, RT.TOPIC, "t")
    assert rec.asked[0] == ("User:alice", Op.READ, RT.TOPIC, "t", "10.1.2.3")
    assert isinstance(rec.asked[0][1], Op) and isinstance(rec.asked[0][2], RT)


def test_authorized_names_asks_each_name_once():
    rec = Recorder({("User:alice", Op.DESCRIBE, RT.TOPIC, "a")})
    assert common.authorized_names(ctx(rec), Op.DESCRIBE, RT.TOPIC, ["a", "b", "a", "b"]) == {"a"}
    assert sorted(q[3] for q in rec.asked) == ["a", "b"]


def test_a_forwarded_request_passes_with_the_forwarding_nodes_cluster_action():
    node = ("User:node", Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    forwarded = ctx(Recorder({node}), principal="User:node", client_id="kbroker-forward-2")
    assert common.authorize(forwarded, Op.CREATE, RT.TOPIC, "t")
    assert common.authorized_names(forwarded, Op.DELETE, RT.TOPIC, ["t", "u"]) == {"t", "u"}
    assert common.cluster_authorized(forwarded, Op.ALTER)
    # the same principal without the forwarding client id, or a forwarding client id without CLUSTER_ACTION
    assert not common.authorize(ctx(Recorder({node}), principal="User:node"), Op.CREATE, RT.TOPIC, "t")
    assert not common.authorize(ctx(Recorder(set()), client_id="kbroker-forward-2"), Op.CREATE, RT.TOPIC, "t")


def test_config_resources_map_to_kafkas_acl_resources_and_errors():
    rec = Recorder({("User:alice", Op.ALTER_CONFIGS, RT.TOPIC, "t"), ("User:alice", Op.ALTER_CONFIGS, RT.GROUP, "g")})
    c = ctx(rec)
    assert common.config_resource_denied(c, Op.ALTER_CONFIGS, 2, "t") == 0
    assert common.config_resource_denied(c, Op.ALTER_CONFIGS, 2, "u") == 29  # TOPIC_AUTHORIZATION_FAILED
    assert common.config_resource_denied(c, Op.ALTER_CONFIGS, 32, "g") == 0
    assert common.config_resource_denied(c, Op.ALTER_CONFIGS, 32, "h") == 30  # GROUP_AUTHORIZATION_FAILED
    for broker_type in (4, 8, 16):  # BROKER, BROKER_LOGGER, CLIENT_METRICS: the cluster
        assert common.config_resource_denied(c, Op.ALTER_CONFIGS, broker_type, "1") == 31  # CLUSTER_...
    assert rec.asked[-1][2:4] == (RT.CLUSTER, "kafka-cluster")


def test_authorize_any_uses_the_authorizers_own_answer_when_it_has_one():
    rec = Recorder({("User:alice", Op.WRITE, RT.TOPIC, "b")})
    assert authorize_any(rec, "User:alice", Op.WRITE, RT.TOPIC, "", ["a", "b"])
    assert not authorize_any(rec, "User:alice", Op.WRITE, RT.TOPIC, "", ["a"])

    class ByType(Recorder):
        def authorize_by_resource_type(self, principal, operation, resource_type, host) -> bool:  # noqa: ANN001
            return principal == "User:alice"

    by_type = ByType(set())
    assert authorize_any(by_type, "User:alice", Op.WRITE, RT.TOPIC, "", ["a", "b"]) and not by_type.asked
    assert common.authorize_any_topic(ctx(by_type), Op.WRITE)
