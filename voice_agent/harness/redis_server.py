"""A real ``redis-server`` on a free loopback port, its data in a given directory (tests and benchmarks).

``scripts/ensure_redis`` installs Debian's redis-server when it is missing; without the binary,
:func:`redis_server` raises :class:`RedisServerMissing` (the tests turn it into a loud skip).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists()
                                                else None)
MISSING = "REDIS-SERVER IS NOT INSTALLED (scripts/ensure_redis installs it: apt-get install -y redis-server)"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` binary on PATH or in /usr/bin."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """Runs redis-server on a free loopback port; yields its URL, stops it at the end.

    Raises:
        RedisServerMissing: The binary is not installed.
        RuntimeError: It did not answer PING within 10 s.
    """
    if REDIS_SERVER is None:
        raise RedisServerMissing(MISSING)
    port = free_port()
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
         "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
