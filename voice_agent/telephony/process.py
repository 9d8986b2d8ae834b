"""The serving process: the listening socket, uvicorn around the bridge, and the signals that drain it.

:class:`DrainingServer` is uvicorn that drains calls on the first SIGTERM/SIGINT (and, in a worker of
``serve --workers``, pauses and resumes accepting for its accept gate); :func:`serve` runs the bridge until
drained, :func:`running_bridge` runs one in the current event loop for tests and tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType

import uvicorn
from loguru import logger

from voice_agent.call.factory import CallFactory
from voice_agent.telephony.accept_gate import AcceptGate
from voice_agent.telephony.app import VoiceBridge
from voice_agent.telephony.bridge import PolicyWebSocketProtocol
from voice_agent.telephony.config import ConfigError, ServerConfig
from voice_agent.telephony.heap import settle_heap
from voice_agent.telephony.journal import ensure_record_dir
from voice_agent.telephony.local_fleet import LocalFleet


def bind_socket(host: str, port: int, send_buffer: int | None = None) -> socket.socket:
    """A listening TCP socket; accepted sockets inherit ``send_buffer`` (SO_SNDBUF) on Linux.

    Never ``SO_REUSEPORT``: a port another process listens on is refused, and no later process can take
    a share of this one's connections (``serve --workers`` forks its workers onto this one socket).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn that drains calls on the first SIGTERM/SIGINT and exits at once on the second."""

    def __init__(self, config: uvicorn.Config, bridge: VoiceBridge) -> None:
        super().__init__(config)
        self.bridge = bridge
        self._drain_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening: socket.socket | None = None  # kept to accept on again after a pause (a worker's gate)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serves until drained (old call records are deleted meanwhile, daily)."""
        self._loop = asyncio.get_running_loop()
        housekeeping = self._loop.create_task(self.bridge.housekeeping())
        heartbeat = self._loop.create_task(self.bridge.fleet_heartbeat())
        leases = self._loop.create_task(self.bridge.lease_heartbeat())
        tasks = [housekeeping, heartbeat, leases]
        fleet, group = self.bridge.config.fleet, self.bridge.config.group_size
        if group > 1 and isinstance(fleet, LocalFleet) and sockets:
            # uvicorn gets a copy of the socket: pausing closes that copy, and resuming accepts on a new one.
            self._listening = sockets[0]
            sockets = [self._listening.dup()]
            self.bridge.gate = AcceptGate(fleet, group, self.bridge.live_calls, self)
            tasks.append(self._loop.create_task(self._gate_when_started(self.bridge.gate)))
        try:
            await super().serve(sockets)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _gate_when_started(self, gate: AcceptGate) -> None:
        while not self.started:
            await asyncio.sleep(0.05)
        self.pause_accepting()  # uvicorn's server accepts every connection waiting at once: one at a time instead
        await self.resume_accepting()
        await gate.run()

    def pause_accepting(self) -> None:
        """Stops taking new connections on the shared socket (the other workers take them; calls go on)."""
        stop_accepting(self.servers)

    async def resume_accepting(self) -> None:
        """Takes new connections on the shared socket again."""
        if self._listening is None or self.should_exit or self.bridge.draining:
            return
        config = self.config

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop)

        # One connection per wake-up (asyncio accepts up to its backlog argument at once): the workers woken
        # together take turns, and a burst is not all taken by one before its gate has seen the first.
        self.pause_accepting()  # never two listeners: one nobody closes would accept for good
        copy = self._listening.dup()
        server = await asyncio.get_running_loop().create_server(protocol, sock=copy, backlog=1)
        copy.listen(config.backlog)  # the kernel's queue, shared by the workers, stays as long as it was
        self.servers = [server]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain; second: exit now."""
        if self._drain_task is not None or self._loop is None:
            self.should_exit = True
            self.force_exit = sig == signal.SIGINT
            return
        logger.info("signal {}: draining calls before exit", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self.begin_drain)

    def begin_drain(self) -> None:
        """Starts draining; the server exits once drained."""
        if self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.bridge.drain()
        finally:
            self.should_exit = True


def stop_accepting(servers: list[asyncio.Server]) -> None:
    """Stops ``servers`` accepting now, and closes them (this worker's copies of the socket) right after.

    Not ``close()`` at once: a connection accepted a moment ago gets its transport in a task still to run, and
    asyncio fails that task when its server is closed (``Server._attach``), dropping the connection without a
    reply ("did not receive a valid HTTP response"). So the socket is no longer read from now, and the close
    is queued behind the tasks of the connections already accepted (on loops that read it with a reader).
    """
    loop = asyncio.get_running_loop()
    for server in servers:
        for sock in server.sockets:
            loop.remove_reader(sock.fileno())
        loop.call_soon(server.close)


def uvicorn_config(bridge: VoiceBridge) -> uvicorn.Config:
    """uvicorn settings for the bridge (frame size cap, quiet logs, no lifespan)."""
    return uvicorn.Config(
        bridge.app, ws_max_size=bridge.config.ws_max_size, lifespan="off", log_level="warning",
        ws=PolicyWebSocketProtocol, timeout_graceful_shutdown=5, access_log=False,
        # The client address is the socket's: a forged X-Forwarded-For from loopback must not dodge the
        # per-address rate limit and fair share of unsigned webhooks.
        proxy_headers=False,
    )


def listen(config: ServerConfig) -> socket.socket:
    """The bridge's listening socket.

    Raises:
        ConfigError: The address cannot be bound (port in use, no such interface), in one line.
    """
    try:
        return bind_socket(config.host, config.port, config.socket_send_buffer)
    except (OSError, OverflowError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        hint = " (another process is listening there; pick another --port)" if isinstance(exc, OSError) and (
            exc.errno == errno.EADDRINUSE) else ""
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {why}{hint}") from None


async def serve(config: ServerConfig, call_factory: CallFactory, *, ready: asyncio.Event | None = None,
                sock: socket.socket | None = None) -> None:
    """Runs the bridge until SIGTERM/SIGINT has drained it.

    Args:
        config: The bridge's settings.
        call_factory: Builds each call's parts.
        ready: Set once warmed up, as the bridge starts accepting.
        sock: A listening socket to accept on once warmed up (a ``serve --workers`` worker inherits its
            supervisor's); None: bind ``config``'s address now.

    Raises:
        ConfigError: Bad configuration.
        AudioModelError: A model of the audio stack is missing.
    """
    config.validate()
    if config.transcript_dir is not None:
        try:
            ensure_record_dir(Path(config.transcript_dir))
        except OSError as exc:
            raise ConfigError(f"--transcripts {config.transcript_dir}: {exc.strerror or exc}") from None
    if sock is None:
        sock = listen(config)  # a port in use fails now, before anything else starts or the models load
    try:
        bridge = VoiceBridge(config, call_factory)
        await asyncio.to_thread(bridge.warm_up)
    except BaseException:
        sock.close()
        raise
    server = DrainingServer(uvicorn_config(bridge), bridge)
    heap = settle_heap(config.gc_young_threshold)
    logger.info("bridge listening on {}:{} ({}, {} calls max; gc thresholds {}, {} start-up objects frozen)",
                config.host, sock.getsockname()[1], config.provider.value, config.max_calls,
                heap.thresholds, heap.frozen)
    if ready is not None:
        ready.set()
    try:
        await server.serve(sockets=[sock])
    finally:
        await asyncio.to_thread(bridge.close)


@contextlib.asynccontextmanager
async def running_bridge(config: ServerConfig, call_factory: CallFactory) -> AsyncIterator[tuple[VoiceBridge, str]]:
    """Runs the bridge in this event loop on ``config.host`` (port 0: any free port), for tests and tools.

    Yields:
        (bridge, base URL such as ``http://127.0.0.1:40123``).
    """
    bridge = VoiceBridge(config, call_factory)
    await asyncio.to_thread(bridge.warm_up)
    settle_heap(config.gc_young_threshold)  # the collector as serve runs it (a test gets it back: conftest)
    sock = listen(config)
    port = sock.getsockname()[1]
    server = DrainingServer(uvicorn_config(bridge), bridge)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(200):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        if task.done():
            task.result()
        yield bridge, f"http://{config.host}:{port}"
    finally:
        if not bridge.draining:
            await bridge.drain(timeout=5)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        sock.close()
        await asyncio.to_thread(bridge.close)
