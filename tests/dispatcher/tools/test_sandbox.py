"""The shell tool in the session's bubblewrap sandbox (``context.sandbox``),
for real: no writes outside the workspace, no network, no way to remount /
read-write, and nothing outlives the call."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from dispatcher import ToolExecutionError, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, hidden_paths
from dispatcher.tools import ShellTool
from tests.dispatcher.tools.support import run_tool, text_of

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed; Debian package 'bubblewrap'",
)


def _box(ws: WorkspaceFileAPI, hidden: tuple[str, ...] = ()) -> Sandbox:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    return Sandbox(SandboxConfig(bwrap, hidden_paths(hidden)), ws.workspace_root)


@pytest.fixture
def var_tmp_dir() -> Iterator[Path]:
    """A folder outside the workspace and outside /tmp (which the sandbox
    replaces with its own tmpfs), so a write there would reach the host."""
    path = Path(tempfile.mkdtemp(prefix="toolrelay-sandbox-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def listener() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that answers every connection."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


async def test_workspace_is_writable(root: Path, ws: WorkspaceFileAPI) -> None:
    out = await run_tool(
        ShellTool, {"command": "echo made > inside.txt && cat inside.txt"}, ws, sandbox=_box(ws)
    )
    assert out.success and out.metadata["sandboxed"] is True
    assert out.metadata["background_killed"] is False
    assert (root / "inside.txt").read_text() == "made\n"


async def test_write_outside_the_workspace_fails(ws: WorkspaceFileAPI, var_tmp_dir: Path) -> None:
    target = var_tmp_dir / "escaped.txt"
    out = await run_tool(ShellTool, {"command": f"echo x > {target}"}, ws, sandbox=_box(ws))
    assert not out.success
    assert "Read-only file system" in text_of(out)
    assert not target.exists()
    # The same command outside the sandbox does write: the test can tell.
    control = await run_tool(ShellTool, {"command": f"echo x > {target}"}, ws)
    assert control.success and target.exists()


async def test_tmp_is_private(ws: WorkspaceFileAPI, tmp_path: Path) -> None:
    probe = tmp_path / "outside-probe.txt"
    out = await run_tool(
        ShellTool, {"command": f"echo x > {probe} && ls {tmp_path}"}, ws, sandbox=_box(ws)
    )
    assert out.success  # /tmp is a fresh tmpfs: the write lands there...
    assert not probe.exists()  # ...and never on the host.


async def test_network_is_unreachable(ws: WorkspaceFileAPI, listener: int) -> None:
    script = (
        f"import socket; s = socket.create_connection(('127.0.0.1', {listener}), timeout=3); "
        "print(s.recv(16).decode().strip())"
    )
    control = await run_tool(ShellTool, {"command": f'python3 -c "{script}"'}, ws)
    assert control.success and "hello" in text_of(control)
    out = await run_tool(ShellTool, {"command": f'python3 -c "{script}"'}, ws, sandbox=_box(ws))
    assert not out.success
    assert "hello" not in text_of(out)
    assert "Error" in text_of(out)  # ConnectionRefused / Network is unreachable


async def test_remount_read_write_fails(ws: WorkspaceFileAPI, var_tmp_dir: Path) -> None:
    target = var_tmp_dir / "after-remount.txt"
    command = f"mount -o remount,rw / ; echo status=$?; echo x > {target}"
    out = await run_tool(ShellTool, {"command": command}, ws, sandbox=_box(ws))
    body = text_of(out)
    assert "status=0" not in body
    assert "permission denied" in body.lower()
    assert not target.exists()


async def test_no_capabilities_inside(ws: WorkspaceFileAPI) -> None:
    out = await run_tool(
        ShellTool, {"command": "grep -E '^Cap(Eff|Prm)' /proc/self/status"}, ws, sandbox=_box(ws)
    )
    lines = text_of(out).splitlines()[2:]
    assert lines and all(line.split()[1] == "0000000000000000" for line in lines)


def _daemons(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


async def test_daemonised_process_dies_with_the_sandbox(ws: WorkspaceFileAPI) -> None:
    # setsid leaves the process group, so killing the group cannot reach it;
    # the sandbox's PID namespace still ends it when the command returns.
    marker = f"toolrelay-daemon-{uuid.uuid4().hex[:12]}"
    command = (
        f"setsid bash -c 'exec -a {marker} sleep 100' > /dev/null 2>&1 & "
        f"for i in $(seq 50); do pgrep -f {marker} > /dev/null && break; sleep 0.05; done; "
        f"pgrep -f {marker} > /dev/null && echo daemon-running"
    )
    # Control, outside the sandbox: the daemon escapes the process group and survives.
    control = await run_tool(ShellTool, {"command": command}, ws)
    assert "daemon-running" in text_of(control)
    survivors = _daemons(marker)
    assert survivors, "the control daemon should outlive an unsandboxed call"
    for proc in survivors:
        proc.kill()  # started by this test; stopped by PID
    # Inside the sandbox it runs too, and is gone once the call returns.
    out = await run_tool(ShellTool, {"command": command}, ws, sandbox=_box(ws))
    assert "daemon-running" in text_of(out)
    async with asyncio.timeout(60):
        while _daemons(marker):  # noqa: ASYNC110 - polls the process table
            await asyncio.sleep(0.05)


async def test_a_broken_sandbox_fails_closed(ws: WorkspaceFileAPI, root: Path) -> None:
    # bwrap gone after start-up: the call fails, it never runs unsandboxed instead.
    broken = Sandbox(SandboxConfig(str(root / "no-such-bwrap")), ws.workspace_root)
    with pytest.raises(ToolExecutionError, match="could not start the command"):
        await run_tool(ShellTool, {"command": "echo hi > ran.txt"}, ws, sandbox=broken)
    assert not (root / "ran.txt").exists()


def test_socket_module_is_real() -> None:
    # Guard for the network test: the listener really is a TCP socket on loopback.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[0] == "127.0.0.1"


async def test_hidden_paths_are_unreadable_inside(
    root: Path, ws: WorkspaceFileAPI, var_tmp_dir: Path
) -> None:
    secrets_dir = var_tmp_dir / "data"
    secrets_dir.mkdir()
    (secrets_dir / "token").write_text("s3cret-token")
    lone_file = var_tmp_dir / "netrc"
    lone_file.write_text("password hunter2")
    readable = var_tmp_dir / "plain.txt"
    readable.write_text("not secret")
    hiding = _box(ws, (str(secrets_dir), str(lone_file)))
    out = await run_tool(
        ShellTool,
        {
            "command": f"cat {secrets_dir}/token; cat {lone_file}; ls -A {secrets_dir}; "
            f"cat {readable}"
        },
        ws,
        sandbox=hiding,
    )
    text = text_of(out)
    assert "s3cret-token" not in text and "hunter2" not in text
    assert "not secret" in text  # everything else stays readable
    # Without hiding them the same command does read them: the test can fail.
    bare = await run_tool(ShellTool, {"command": f"cat {secrets_dir}/token"}, ws, sandbox=_box(ws))
    assert "s3cret-token" in text_of(bare)


def test_a_hidden_path_around_or_inside_the_workspace_is_refused(
    root: Path, ws: WorkspaceFileAPI
) -> None:
    # Hiding it would hide the workspace, binding the workspace would expose
    # it: no sandbox is built (sessions refuse such workspaces beforehand).
    for hidden in (str(root.parent), str(root), str(root / "inner")):
        (root / "inner").mkdir(exist_ok=True)
        with pytest.raises(SandboxUnavailable, match="overlaps the hidden path"):
            _box(ws, (hidden,))
