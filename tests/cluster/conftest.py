"""A real redis-server for the cluster tests, on 127.0.0.1, stopped by PID.

Nothing is skipped: without redis-server the tests fail and say how to get it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

STEP_TIMEOUT = 60.0
START_TIMEOUT = 30.0


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the test process dies, even if it is
    killed before the fixture can stop the server (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process with its own data dir."""

    def __init__(self, directory: Path, *, appendonly: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed: run `scripts/bootstrap --system` as root "
                "(it installs Debian's redis-server) and run the tests again",
                pytrace=False,
            )
        self.binary = binary
        self.directory = directory
        self.appendonly = appendonly
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--protected-mode", "yes",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT
        for _ in range(1000):
            if self.process.poll() is not None:
                pytest.fail(f"redis-server exited at start with code {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.stop()
        pytest.fail("redis-server did not answer PING in time")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def client(self) -> aioredis.Redis:
        return aioredis.Redis.from_url(self.url, decode_responses=True)


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[list[RedisServer]]:
    """Servers a test starts itself (persistence, restarts); all stopped after it."""
    servers: list[RedisServer] = []
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server per test module, emptied before each test by ``redis_client``."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = redis_server.client()
    await client.flushall()
    yield client
    await client.aclose()
