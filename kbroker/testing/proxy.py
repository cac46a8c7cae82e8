"""A TCP proxy for one network link, with faults: cut, partition (black hole), delay.

Put one in front of every link a test wants to break (client -> broker, node -> node): the upstream node
advertises the proxy's address, and the test calls :meth:`TcpProxy.partition`, :meth:`TcpProxy.cut`,
:meth:`TcpProxy.set_delay` and :meth:`TcpProxy.heal` while real clients run. The proxy runs its own event loop
in a daemon thread, so it serves synchronous and asynchronous tests alike, and it listens on 127.0.0.x only.

* **partition**: bytes stop flowing both ways and new connections hang (they are accepted but not connected
  upstream) until :meth:`heal` — what a network partition looks like to TCP: silence, no reset. Bytes already
  sent are held, not lost, as TCP would retransmit them after the partition heals.
* **cut**: every open connection is closed (the peers see a reset or EOF) and new ones are closed at once.
* **delay**: every chunk is held ``ms`` milliseconds before it is forwarded (order kept per direction).

Example::

    with TcpProxy("127.0.0.1", broker_port) as proxy:
        ...  # clients connect to proxy.port
        proxy.partition(); time.sleep(5); proxy.heal()
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> None:
        if not listen_host.startswith("127."):
            raise ValueError("the proxy listens on loopback addresses only")
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.port = listen_port
        self.delay_ms = 0
        self.bytes_forwarded = 0
        self.connections_accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kbroker-tcp-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._flowing: asyncio.Event | None = None
        self._cut = False

    # ------------------------------------------------------------------ control (any thread)
    def start(self) -> TcpProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def partition(self) -> None:
        """Stop all traffic through the link (both directions, new connections too) until :meth:`heal`."""
        self._call(lambda: self._flowing.clear())  # type: ignore[union-attr]

    def cut(self) -> None:
        """Close every connection through the link, and every new one, until :meth:`heal`."""
        def do() -> None:
            self._cut = True
            for w in list(self._open):
                w.transport.abort()
            self._open.clear()
        self._call(do)

    def heal(self) -> None:
        """Undo :meth:`partition` and :meth:`cut` (delays stay as set)."""
        def do() -> None:
            self._cut = False
            self._flowing.set()  # type: ignore[union-attr]
        self._call(do)

    def set_delay(self, ms: int) -> None:
        self.delay_ms = max(0, int(ms))

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _call(self, fn: Any) -> None:
        async def run() -> None:
            fn()
        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ------------------------------------------------------------------ the loop's side
    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, self.listen_host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._open):
            w.transport.abort()
        self._open.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self._cut:
            writer.transport.abort()
            return
        self._open.add(writer)
        assert self._flowing is not None
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            self._open.discard(writer)
            return
        if self._cut:
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._open.add(up_writer)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            self._open.discard(w)
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.delay_ms:
                    await asyncio.sleep(self.delay_ms / 1000)
                await self._flowing.wait()
                if self._cut or writer.is_closing():
                    break
                writer.write(data)
                self.bytes_forwarded += len(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self._cut:
                writer.transport.abort()
            elif not writer.is_closing():
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    writer.close()
