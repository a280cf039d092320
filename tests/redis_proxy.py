"""A TCP proxy in front of the test Redis: stop it and Redis is "down", start it and Redis is back.

Used instead of stopping the shared Redis server, which other tests and processes rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from urllib.parse import urlsplit, urlunsplit


class TcpProxy:
    """Forwards a local port to Redis; ``stop`` cuts every connection, ``start`` reopens the same port."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.port = 0
        self.delay_s = 0.0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._writers.add(client_writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.close()
            return
        self._writers.add(upstream_writer)
        pipes = {
            asyncio.create_task(self._pipe(client_reader, upstream_writer)),
            asyncio.create_task(self._pipe(upstream_reader, client_writer)),
        }
        self._pipes |= pipes
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for pipe in pipes:
            pipe.cancel()
        self._pipes -= pipes
        for writer in (client_writer, upstream_writer):
            writer.close()
            self._writers.discard(writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()

    def url_for(self, redis_url: str) -> str:
        """``redis_url`` rewritten to go through this proxy (same database, options)."""
        return urlunsplit(urlsplit(redis_url)._replace(netloc=f"127.0.0.1:{self.port}"))

    @classmethod
    def for_url(cls, redis_url: str) -> TcpProxy:
        target = urlsplit(redis_url)
        return cls(target.hostname or "127.0.0.1", target.port or 6379)


class ThreadedProxy:
    """A ``TcpProxy`` on its own thread and event loop, so it keeps forwarding whatever the test's
    loop is doing (an app under Litestar's test client may hold that loop)."""

    def __init__(self, redis_url: str) -> None:
        self._proxy = TcpProxy.for_url(redis_url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._proxy.port

    def url_for(self, redis_url: str) -> str:
        return self._proxy.url_for(redis_url)

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._proxy.start(), self._loop).result(timeout=5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._proxy.stop(), self._loop).result(timeout=5)

    def close(self) -> None:
        if self._proxy._server is not None:
            self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
