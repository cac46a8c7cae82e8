"""An in-process broker for handler tests: requests go through the real dispatch (header, codec, handler,
response encoding) without sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kbroker.config import BrokerConfig
from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES
from kbroker.protocol.codec import read_uvarint
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.protocol.send import FileRegion


class _Connection:
    listener_name = "PLAINTEXT"
    client_software = None
    peer = ("127.0.0.1", 0)


class Node:
    """A started ``Broker`` plus ``call(api_key, version, request)`` -> decoded response."""

    def __init__(self, loop: asyncio.AbstractEventLoop, broker: Any) -> None:
        self.loop = loop
        self.broker = broker
        self._cid = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    def call(self, api_key: int, version: int, request: Any) -> Any:
        self._cid += 1
        frame = encode_request_header(api_key, version, self._cid, "tests") + codec.encode(request, version)
        chunks = self.run(self.broker.apis.handle_frame(_Connection(), frame))
        if chunks is None:
            return None
        data = b"".join(c.read_bytes() if isinstance(c, FileRegion) else bytes(c) for c in chunks)
        pos = 4
        if response_header_version(api_key, version) == 1:
            n, pos = read_uvarint(data, pos)
            assert n == 0
        response, end = codec.decode(RESPONSES[api_key], data, version, pos)
        assert end == len(data)
        return response


def start_node(data_dir: Path, **props: str) -> Node:
    from kbroker.server.broker import Broker

    base = {"node.id": "1", "process.roles": "broker,controller", "listeners": "PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir / "logs"),
            "num.partitions": "1", "offsets.topic.replication.factor": "1"}
    base.update(props)
    loop = asyncio.new_event_loop()
    broker = Broker(BrokerConfig(base))
    loop.run_until_complete(broker.start())
    return Node(loop, broker)


def stop_node(node: Node) -> None:
    node.loop.run_until_complete(node.broker.stop())
    node.loop.close()


@pytest.fixture
def node(tmp_path: Path):
    n = start_node(tmp_path)
    try:
        yield n
    finally:
        stop_node(n)
