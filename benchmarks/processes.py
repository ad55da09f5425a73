"""The processes a benchmark talks to: the real server, the bare baseline
server and the WebSocket client process.

Everything binds 127.0.0.1 with an OS-picked port (read back from the
process's first lines of output), every wait is bounded, and every process
is stopped by its own PID (SIGTERM, then SIGKILL if it does not go).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

import httpx2
import psutil
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
PLUGINS = [
    "benchmarks.plugin_tools:EmitTool",
    "benchmarks.plugin_tools:ConfirmTool",
    "benchmarks.plugin_tools:SleepTool",
]
_TOOLRELAY_PORT = re.compile(r"^\s*API:\s+http://[^\s:]+:(\d+)\s*$", re.MULTILINE)
_BARE_PORT = re.compile(r"^PORT (\d+)$", re.MULTILINE)
# Keys, tokens and model settings of the caller never reach a benchmark server.
_SCRUBBED = ("TOOLRELAY_", "ANTHROPIC_", "OPENAI_")


class ProcessError(RuntimeError):
    """A benchmark process did not start or misbehaved; the message has its stderr."""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


class ServerHandle:
    """A server subprocess: ``toolrelay serve`` or the bare baseline app."""

    def __init__(
        self,
        root: Path,
        *,
        bare: bool = False,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.bare = bare
        self.config = config
        self.token = "bench-" + secrets.token_urlsafe(24)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.stdout_path = root / "stdout.log"
        self.stderr_path = root / "stderr.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ProcessError("server not started")
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, path: str, **query: Any) -> str:
        params = {k: v for k, v in query.items() if v is not None}
        if not self.bare:
            params["token"] = self.token
        qs = f"?{urlencode(params)}" if params else ""
        return f"ws://127.0.0.1:{self.port}{path}{qs}"

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.bare else {"Authorization": f"Bearer {self.token}"}

    def http(self, **kwargs: Any) -> httpx2.AsyncClient:
        kwargs.setdefault("timeout", 30.0)
        limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
        kwargs.setdefault("limits", limits)
        return httpx2.AsyncClient(base_url=self.base_url, headers=self.headers, **kwargs)

    def _command(self) -> list[str]:
        if self.bare:
            return [sys.executable, "-m", "benchmarks.bare_server"]
        cmd = [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(self.root / "data"),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        if self.config is not None:
            path = self.root / "config.yaml"
            path.write_text(yaml.safe_dump(self.config), encoding="utf-8")
            cmd += ["--config", str(path)]
        return cmd

    def start(self) -> ServerHandle:
        env = _env({} if self.bare else {"TOOLRELAY_TOKEN": self.token})
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self._command(),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        pattern = _BARE_PORT if self.bare else _TOOLRELAY_PORT
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ProcessError(f"server exited with {self.proc.returncode}:\n{self.stderr()}")
            if not self.port:
                match = pattern.search(self.stdout_path.read_text(errors="replace"))
                if match:
                    self.port = int(match.group(1))
            if self.port:
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(f"{self.base_url}/healthz", timeout=2.0).status_code == 200:
                        return
            time.sleep(0.02)
        raise ProcessError(f"server not ready within {START_TIMEOUT:g} s:\n{self.stderr()}")

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def rss(self) -> int:
        """Resident set size of the server process alone (not its log child), bytes."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the server and its children (the
        event log process), which together do the server's work."""
        proc = psutil.Process(self.pid)
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = p.cpu_times()
                total += times.user + times.system
        return total

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def __enter__(self) -> ServerHandle:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ClientProcess:
    """``python -m benchmarks.ws_client``: WebSockets in a process of their own.

    It receives one JSON spec on stdin and prints ``{"ready": ...}`` once every
    socket is open. In ``measure`` mode it then receives until each socket has
    its expected messages (or its time is up); in ``hold`` mode it keeps the
    sockets open, reading and discarding, until it reads "quit" on stdin.
    Either way it prints its result as one JSON line and exits.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, within: float = 120.0) -> dict[str, Any]:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.ws_client",
            cwd=REPO_ROOT,
            env=_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.spec).encode() + b"\n")
        await self.proc.stdin.drain()
        ready = await self._line(within)
        if not ready.get("ready"):
            raise ProcessError(f"client process not ready: {ready}")
        return ready

    async def _line(self, within: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), within)
        except TimeoutError:
            await self.kill()
            raise ProcessError(f"client process silent for {within:g} s") from None
        if not line:
            err = b""
            if self.proc.stderr is not None:
                err = await self.proc.stderr.read()
            raise ProcessError("client process ended early:\n" + err.decode(errors="replace"))
        result: dict[str, Any] = json.loads(line)
        return result

    async def result(self, within: float = 300.0) -> dict[str, Any]:
        result = await self._line(within)
        await self.wait()
        return result

    async def quit(self) -> dict[str, Any]:
        """Close its sockets and end it (hold mode); returns what it reports."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"quit\n")
        await self.proc.stdin.drain()
        return await self.result(60.0)

    async def wait(self) -> None:
        if self.proc is None:
            return
        try:
            await asyncio.wait_for(self.proc.wait(), 30.0)
        except TimeoutError:
            await self.kill()

    async def kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
