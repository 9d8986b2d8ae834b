"""A small health-checked balancer: each new TCP connection goes to the first worker whose ``/readyz`` is 200.

That is what a real balancer with health checks does for the resume path: a worker killed with
``kill -9`` refuses connections, a draining one answers 503, and the provider's next request (the
``<Connect action>`` and the new stream) reaches a worker that can take the call. For trying several
workers on one machine (``voice-agent balance``) and for the resume tests; in production put nginx,
HAProxy or the cloud's balancer in front, with the same ``/readyz`` health check.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence


async def _ready(host: str, port: int) -> bool | None:
    """True: ready; False: answering but not ready (full, draining, warming); None: not answering."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.5)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 1.0)
        return b" 200 " in status if status.startswith(b"HTTP/") else None
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class ReadyProxy:
    """Listens on ``host:port`` and forwards each connection to the first ready worker.

    Args:
        backends: The workers' (host, port), in order of preference.
        host: Interface to listen on.
        port: Port to listen on (0: any free port).
    """

    def __init__(self, backends: Sequence[tuple[str, int]], host: str = "127.0.0.1", port: int = 0) -> None:
        self.backends = list(backends)
        self.routed: list[int] = []
        """Backend port each connection went to."""
        self._server: asyncio.Server | None = None
        self.host = host
        self.port = port

    async def __aenter__(self) -> ReadyProxy:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def serve_forever(self) -> None:
        """Runs until cancelled."""
        async with self:
            assert self._server is not None
            await self._server.serve_forever()

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()

    @property
    def url(self) -> str:
        """``http://<host>:<port>``."""
        return f"http://{self.host}:{self.port}"

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        answering: list[tuple[str, int]] = []
        for host, port in self.backends:
            state = await _ready(host, port)
            if state is False:
                answering.append((host, port))
            if not state:
                continue
            if await self._forward(host, port, client_reader, client_writer):
                return
        # None is ready (full, draining): a worker that answers still tells the caller so (the busy line, or its
        # fair share of reservations against a flood of bare webhooks), rather than a dropped connection.
        for host, port in answering:
            if await self._forward(host, port, client_reader, client_writer):
                return
        client_writer.close()

    async def _forward(self, host: str, port: int, client_reader: asyncio.StreamReader,
                       client_writer: asyncio.StreamWriter) -> bool:
        """Pipes the client to ``host:port`` until either side closes; False when it cannot connect."""
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            return False
        self.routed.append(port)
        if len(self.routed) > 10000:
            del self.routed[:5000]
        await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
        return True
