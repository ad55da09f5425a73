"""Start the real toolrelay server for tests.

``ServerProcess`` runs ``python -m server.cli serve`` as a subprocess on
127.0.0.1 (port 0, so the OS picks a free one; the port is read from the
start-up banner) with a temporary data dir and ``TOOLRELAY_TOKEN`` set, and
waits (bounded) until ``GET /healthz`` answers. It can restart on the same
data dir and port, stop gracefully (SIGTERM) or die hard (SIGKILL), always by
its own PID. stdout and stderr go to files beside the data dir, so a test can
read the logs (and nothing blocks on a full pipe).

``InProcessServer`` runs the same app under uvicorn in a background thread:
faster to start, for tests that do not need a separate process.

Fixtures (import them into your conftest.py)::

    from tests.harness import server, server_factory  # noqa: F401

- ``server``: one started ServerProcess with the default configuration.
- ``server_factory``: ``server_factory(config=None, env=None, **kw)`` starts
  another one (e.g. with a YAML config dict); all are stopped at teardown.

Example::

    async def test_x(server):
        async with httpx2.AsyncClient(base_url=server.base_url,
                                      headers=server.headers()) as http:
            r = await http.post("/sessions", json={"workspace": str(tmp_path)})
        async with websockets.connect(server.ws_url(f"/sessions/{sid}/events", after=0)):
            ...
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
_BANNER_API = re.compile(r"^\s*API:\s+http://[^\s:]+:(\d+)\s*$", re.MULTILINE)
# Variables that would change what the server does (keys, models, tokens);
# every test server starts from a clean slate.
_SCRUBBED_PREFIXES = ("TOOLRELAY_", "ANTHROPIC_", "OPENAI_")


class ServerStartError(RuntimeError):
    """The server did not come up; the message carries its stderr."""


def _scrubbed_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}


class _ServerAddress:
    """Addresses and credentials shared by both kinds of test server."""

    port: int
    token: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def ws_url(self, path: str, *, token: bool = True, **query: Any) -> str:
        """A WebSocket URL for ``path`` with ``?token=`` (unless token=False) and
        any other query parameters (None values are left out)."""
        params = {k: v for k, v in query.items() if v is not None}
        if token:
            params["token"] = self.token
        qs = f"?{urlencode(params)}" if params else ""
        return f"{self.ws_base}{path}{qs}"

    def headers(self, client_name: str | None = None, token: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if client_name:
            headers["X-Client-Name"] = client_name
        return headers

    def client(
        self, client_name: str | None = None, token: str | None = None, **kwargs: Any
    ) -> httpx2.AsyncClient:
        """An async HTTP client for this server (use it as ``async with``)."""
        kwargs.setdefault("timeout", 10.0)
        return httpx2.AsyncClient(
            base_url=self.base_url, headers=self.headers(client_name, token), **kwargs
        )


class ServerProcess(_ServerAddress):
    """The real ``toolrelay serve`` in a subprocess. See the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        extra_args: tuple[str, ...] = (),
        port: int = 0,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.root / "data"
        self.token = token or "test-admin-" + secrets.token_urlsafe(24)
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = self.root / "config.yaml"
            self.config_path.write_text(yaml.safe_dump(dict(config)), encoding="utf-8")
        self.extra_env = dict(env or {})
        self.extra_args = extra_args
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stdout_path = self.root / "stdout-0.log"
        self.stderr_path = self.root / "stderr-0.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    # -- lifecycle ------------------------------------------------------------

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        return cmd + list(self.extra_args)

    def start(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Spawn the server and wait until /healthz answers 200."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"server already running (pid {self.proc.pid})")
        env = _scrubbed_env()
        env.update(
            {
                "TOOLRELAY_TOKEN": self.token,
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(
                    [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
                ),
            }
        )
        env.update(self.extra_env)
        self.stdout_path = self.root / f"stdout-{self.starts}.log"
        self.stderr_path = self.root / f"stderr-{self.starts}.log"
        self.starts += 1
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        port: int | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"toolrelay serve exited with {self.proc.returncode} during start-up:\n"
                    + self.stderr()
                )
            if port is None:
                match = _BANNER_API.search(self.stdout())
                if match:
                    port = int(match.group(1))
                    self.port = port
            if port is not None:
                try:
                    response = httpx2.get(f"{self.base_url}/healthz", timeout=2.0)
                    if response.status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
            time.sleep(0.02)
        raise ServerStartError(
            f"toolrelay serve did not become healthy within {timeout:g} s:\n" + self.stderr()
        )

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """Graceful stop (SIGTERM), SIGKILL if it does not exit in time. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        return proc.returncode

    def interrupt(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """Stop with SIGINT (Ctrl-C), as a user at a terminal would."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(timeout)
        return proc.returncode

    def kill(self) -> None:
        """Die hard (SIGKILL), like a crash: no shutdown code runs."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def restart(self, *, hard: bool = False, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Stop (SIGTERM, or SIGKILL with ``hard``) and start again on the same data dir
        and port, so clients can reconnect to the same URL."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- output -----------------------------------------------------------------

    def stdout(self) -> str:
        return _read(self.stdout_path)

    def stderr(self) -> str:
        return _read(self.stderr_path)

    def all_output(self) -> str:
        """stdout and stderr of every start so far."""
        parts = []
        for i in range(self.starts):
            parts.append(_read(self.root / f"stdout-{i}.log"))
            parts.append(_read(self.root / f"stderr-{i}.log"))
        return "\n".join(parts)

    def __enter__(self) -> ServerProcess:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


class InProcessServer(_ServerAddress):
    """The same app under uvicorn in a background thread (its own event loop).

    Faster to start than a subprocess; it shares this process, so it cannot be
    killed hard. ``config`` is a dict in the YAML file's shape.
    """

    def __init__(
        self, root: Path, *, config: Mapping[str, Any] | None = None, token: str | None = None
    ) -> None:
        from server.auth import TokenRegistry
        from server.config import load_config

        self.root = Path(root)
        self.token = token or "test-admin-" + secrets.token_urlsafe(24)
        self.config_path = self.root / "config.yaml"
        self.root.mkdir(parents=True, exist_ok=True)
        raw = dict(config or {})
        self.config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        self.config = load_config(
            self.config_path,
            env={"TOOLRELAY_TOKEN": self.token},
            overrides={"server.port": 0, "server.data_dir": str(self.root / "data")},
        )
        self.tokens = TokenRegistry(self.config.auth.tokens)
        self.port = 0
        self._thread: threading.Thread | None = None
        self._server: Any = None

    def start(self, timeout: float = START_TIMEOUT) -> InProcessServer:
        import uvicorn

        from server.app import create_app

        app = create_app(self.config, self.tokens)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            loop="asyncio",
            ws="websockets-sansio",
            ws_per_message_deflate=False,
            lifespan="on",
            log_config=None,
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="toolrelay-test", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServerStartError("in-process server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout)

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- pytest fixtures ----------------------------------------------------------------


class ServerFactory:
    """Starts ServerProcesses under one temp dir; stops them all at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.servers: list[ServerProcess] = []

    def __call__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        extra_args: tuple[str, ...] = (),
        start: bool = True,
    ) -> ServerProcess:
        root = self.tmp / f"server-{len(self.servers)}"
        srv = ServerProcess(root, config=config, env=env, token=token, extra_args=extra_args)
        self.servers.append(srv)
        return srv.start() if start else srv

    def stop_all(self) -> None:
        for srv in self.servers:
            srv.stop()


@pytest.fixture
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp("toolrelay"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory()
