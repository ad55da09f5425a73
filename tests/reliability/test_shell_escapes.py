"""Shell escapes, through a real server running the real shell tool in its
bubblewrap sandbox, as root (this machine runs the suite as root, which is
when a sandbox is easiest to get wrong).

- The blocklist evasion corpus (the shell rules' own list of tricks,
  including the usual rewrites: brace and glob forms of ``rm -rf /``,
  functions, aliases, ``set --``, ``printf -v``, ``xargs``/``find -exec``
  feeding a blocked command, process and command substitution) is refused,
  every entry, with ``permission_denied``; nothing runs. Its look-alikes
  are not refused: they reach the sandbox and run there.
- Inside the sandbox: no write outside the workspace (not directly, not by
  remounting, not through /proc, not by a new user namespace), no network
  (not to a listener of this test, not to the server itself), no
  capabilities left.

The server runs with the ``yolo`` preset: no person confirms anything, so
only the blocklist and the sandbox stand between a command and the machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.dispatcher.tools.test_shell_rules import EVASIONS, NOT_BLOCKED
from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import logged_events, server_problems
from tests.server.support import new_session, result_text, start_turn, use, wait_turn

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)
PER_TURN = 64  # the most tool_use blocks one turn may carry


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cfg = config(
        policy={"preset": "yolo"},
        workspaces={"shell": {"enabled": True, "sandbox": True, "timeout": 20}},
    )
    srv = ServerProcess(tmp_path_factory.mktemp("sandboxed"), config=cfg, env=DEBUG_ENV)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _run_commands(
    srv: ServerProcess, workspace: Path, commands: list[str]
) -> list[dict[str, Any]]:
    """Run each command as one shell call; results in order."""
    results: list[dict[str, Any]] = []
    async with srv.client("escapes", timeout=60) as http:
        sid = await new_session(http, workspace)
        for start in range(0, len(commands), PER_TURN):
            batch = commands[start : start + PER_TURN]
            calls = [use(f"c{start + i}", "shell", command=c) for i, c in enumerate(batch)]
            tid = await start_turn(http, sid, *calls)
            turn = await wait_turn(http, sid, tid, within=180)
            assert turn["status"] == "completed", turn
            results.extend(turn["results"])
    return results


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _changes_outside(outside: Path, host_tmp_name: str, etc_hosts: str) -> list[str]:
    changes = [f"created {p}" for p in outside.iterdir() if p.name != "secret.txt"]
    if (outside / "secret.txt").read_text() != "do not touch\n":
        changes.append("secret.txt changed")
    if Path("/tmp", host_tmp_name).exists():
        changes.append(f"/tmp/{host_tmp_name} created on the host")
    if _digest(Path("/etc/hosts")) != etc_hosts:
        changes.append("/etc/hosts changed")
    return changes


async def test_the_evasion_corpus_is_refused_through_the_server(
    sandboxed: ServerProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    canary = workspace / "canary.txt"
    canary.write_text("still here\n")
    assert len(EVASIONS) > 100
    results = await _run_commands(sandboxed, workspace, list(EVASIONS))
    assert len(results) == len(EVASIONS)
    for command, result in zip(EVASIONS, results, strict=True):
        text = result_text(result)
        assert result["is_error"], (command, text)
        assert "blocklist" in text, (command, text)
    failed = {
        e["data"]["tool_use_id"]: e["data"]["error_class"]
        for e in logged_events(sandboxed.data_dir)
        if e["type"] == "tool.failed"
    }
    for i in range(len(EVASIONS)):
        assert failed.get(f"c{i}") == "permission_denied", (EVASIONS[i], failed.get(f"c{i}"))
    assert canary.read_text() == "still here\n"


async def test_the_look_alikes_run_in_the_sandbox(sandboxed: ServerProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    results = await _run_commands(sandboxed, workspace, list(NOT_BLOCKED))
    for command, result in zip(NOT_BLOCKED, results, strict=True):
        text = result_text(result)
        assert "blocklist" not in text, (command, text)
        assert "exit code:" in text, (command, text)


class _Listener:
    """A TCP listener on 127.0.0.1 that counts who connects."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> _Listener:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_inside_the_sandbox_nothing_gets_out(
    sandboxed: ServerProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not touch\n")
    host_tmp_name = f"toolrelay-escape-{secrets.token_hex(6)}"
    etc_hosts = _digest(Path("/etc/hosts"))
    o = str(outside)
    async with _Listener() as listener:
        writes = [
            f"echo pwned > {o}/w1",
            f"touch {o}/w2",
            f"cp /etc/hostname {o}/w3",
            f"mkdir {o}/w4",
            f"ln -s / {o}/w5",
            f"echo pwned >> {o}/secret.txt",
            f"python3 -c \"open('{o}/w6', 'w').write('x')\"",
            f"mount -o remount,rw / ; touch {o}/w7",
            f"mount -o remount,rw {o} ; touch {o}/w8",
            f"mount --bind {workspace} {o} ; touch {o}/w9",
            f"unshare -r sh -c 'mount -o remount,rw / ; touch {o}/w10'",
            f"unshare -rm sh -c 'mount -t tmpfs none {o} ; touch {o}/w11'",
            f"touch /proc/1/root{o}/w12",
            f"touch /proc/self/root{o}/w13",
            f"echo x > /tmp/{host_tmp_name}",
            "echo '127.0.0.1 evil' >> /etc/hosts",
        ]
        network = [
            f"exec 3<>/dev/tcp/127.0.0.1/{listener.port} && echo CONNECTED",
            "python3 -c \"import socket; "
            f"socket.create_connection(('127.0.0.1', {listener.port}), 3); print('CONNECTED')\"",
            f"exec 3<>/dev/tcp/127.0.0.1/{sandboxed.port} && echo CONNECTED",
        ]  # fmt: skip
        checks = ["grep -E '^(Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):' /proc/self/status"]
        commands = writes + network + checks
        results = await _run_commands(sandboxed, workspace, commands)
        connections = listener.connections
    texts = [result_text(r) for r in results]
    by_command = dict(zip(commands, texts, strict=True))
    # Every command really ran inside the sandbox (none was simply refused).
    for command, text in by_command.items():
        assert "exit code:" in text, (command, text)
    # Nothing outside the workspace was created or changed.
    assert _changes_outside(outside, host_tmp_name, etc_hosts) == []
    # No network: nothing reached the listener or the server, every attempt failed.
    assert connections == 0
    for command in network:
        assert "CONNECTED" not in by_command[command], by_command[command]
        assert "exit code: 0" not in by_command[command], by_command[command]
    # No capabilities, and no way to get any back (no_new_privs: not even a
    # setuid-root program such as mount regains them), although uid 0.
    status = by_command[checks[0]]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert f"{cap}:\t0000000000000000" in status, status
    assert "NoNewPrivs:\t1" in status, status
    assert not server_problems(sandboxed), server_problems(sandboxed)


async def test_the_workspace_itself_stays_writable_in_the_sandbox(
    sandboxed: ServerProcess, tmp_path: Path
) -> None:
    """The sandbox is not simply broken: inside the workspace, work gets done."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    results = await _run_commands(
        sandboxed, workspace, ["echo made > made.txt && mkdir -p sub && cp made.txt sub/"]
    )
    assert not results[0]["is_error"], result_text(results[0])
    assert (workspace / "made.txt").read_text() == "made\n"
    assert (workspace / "sub" / "made.txt").read_text() == "made\n"
    async with httpx2.AsyncClient(base_url=sandboxed.base_url, timeout=10) as anon:
        assert (await anon.get("/healthz")).status_code == 200
