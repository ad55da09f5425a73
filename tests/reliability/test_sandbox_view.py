"""The sandbox as a real ``toolrelay serve`` sets it up: decided at start-up
(banner and log say so), hiding what the server holds, and nothing a shell
command starts outliving a ``kill -9`` of the server, sandbox on or off.

Servers live under /var/tmp, never /tmp: the sandbox's /tmp is a fresh
tmpfs, so a data dir or config under /tmp would be hidden whatever the
server's hidden list said, and the view test could not fail.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.harness import ServerProcess, ServerStartError
from tests.reliability.conftest import DEBUG_ENV, config
from tests.server.support import new_session, start_turn, use, wait_turn

HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed")
WAIT = 20.0
CONFIG_SECRET = "config-file-user-token-" + uuid.uuid4().hex
TOKEN_FILE_SECRET = "token-file-secret-" + uuid.uuid4().hex


@pytest.fixture
def var_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="toolrelay-view-", dir="/var/tmp")).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _server(root: Path, *, env: dict[str, str] | None = None, **sections: Any) -> ServerProcess:
    cfg = config(
        auth={"tokens": [{"name": "someone", "token": CONFIG_SECRET, "role": "user"}]},
        policy={"preset": "yolo"},
        **sections,
    )
    return ServerProcess(root / "srv", config=cfg, env={**DEBUG_ENV, **(env or {})})


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    return ws


async def _shell(srv: ServerProcess, workspace: Path, command: str) -> str:
    async with srv.client("view", timeout=60) as http:
        sid = await new_session(http, workspace)
        tid = await start_turn(http, sid, use("tu1", "shell", command=command))
        turn = await wait_turn(http, sid, tid, within=60)
    assert turn["status"] == "completed", turn
    return json.dumps(turn["results"])


@needs_bwrap
async def test_the_sandbox_hides_what_the_server_holds(var_root: Path) -> None:
    srv = _server(var_root)
    srv.start()
    try:
        assert "Sandbox:   on (bubblewrap)" in srv.stdout()
        assert "shell sandbox: on" in srv.stderr()
        data = srv.data_dir
        (data / "canary.txt").write_text("canary-in-the-data-dir")
        (data / "token").write_text(TOKEN_FILE_SECRET)
        assert srv.config_path is not None
        outside = var_root / "outside.txt"
        command = (
            f"cat {data}/canary.txt {data}/token {srv.config_path}; ls -A {data}; "
            "ps -eo pid,args; cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c TOKEN; "
            f"echo x > {outside}; echo end-of-probe"
        )
        text = await _shell(srv, _workspace(var_root), command)
        assert "end-of-probe" in text  # the command did run
        for secret in ("canary-in-the-data-dir", TOKEN_FILE_SECRET, CONFIG_SECRET, srv.token):
            assert secret not in text
        assert "events.sqlite3" not in text
        assert "server.cli" not in text  # ps shows no server process
        assert not outside.exists()
        # Control: the same files are there and readable on the host.
        assert CONFIG_SECRET in srv.config_path.read_text()
        assert (data / "token").read_text() == TOKEN_FILE_SECRET
    finally:
        srv.stop()


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv0 = (proc.info["cmdline"] or [""])[0]
        if argv0.startswith(marker) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


async def _until(predicate: Any, what: str) -> None:
    try:
        async with asyncio.timeout(WAIT):
            while not predicate():  # noqa: ASYNC110 - polls the process table
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.mark.parametrize(
    "sandbox",
    [pytest.param(None, marks=needs_bwrap, id="sandbox-on"), pytest.param(False, id="sandbox-off")],
)
async def test_nothing_outlives_kill_9_of_the_server(var_root: Path, sandbox: bool | None) -> None:
    marker = f"toolrelay-orphan-{uuid.uuid4().hex[:10]}"
    srv = _server(var_root, workspaces={"shell": {"sandbox": sandbox, "timeout": 300}})
    srv.start()
    try:
        expected = "on (bubblewrap)" if sandbox is None else "off (turned off"
        assert f"Sandbox:   {expected}" in srv.stdout()
        command = (
            f"bash -c 'exec -a {marker}-group sleep 1000' & "
            f"setsid bash -c 'exec -a {marker}-daemon sleep 1000' & "
            "wait"
        )
        async with srv.client("orphans") as http:
            sid = await new_session(http, _workspace(var_root))
            await start_turn(http, sid, use("tu1", "shell", command=command))
            await _until(lambda: len(_sleepers(marker)) == 2, "both sleeps to start")
        srv.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        srv.proc.wait(WAIT)  # type: ignore[union-attr]
        await _until(lambda: not _sleepers(marker), "every child to die with the server")
    finally:
        srv.kill()
        for proc in _sleepers(marker):  # only if the test failed: ours, by PID
            proc.kill()


def test_the_banner_says_why_the_sandbox_is_off(var_root: Path) -> None:
    off = _server(var_root / "off", workspaces={"shell": {"sandbox": False}})
    off.start()
    try:
        assert (
            "  Sandbox:   off (turned off by workspaces.shell.sandbox: false): "
            "every shell command asks for confirmation"
        ) in off.stdout()
    finally:
        off.stop()
    # No bubblewrap on PATH: auto turns it off and says why...
    no_bwrap = {"PATH": str(var_root)}
    auto = _server(var_root / "auto", env=no_bwrap)
    auto.start()
    try:
        assert (
            "  Sandbox:   off (bubblewrap (bwrap) is not installed): "
            "every shell command asks for confirmation"
        ) in auto.stdout()
        assert "shell sandbox: off (bubblewrap (bwrap) is not installed)" in auto.stderr()
    finally:
        auto.stop()
    # ...and a required sandbox stops start-up, naming why.
    required = _server(var_root / "req", env=no_bwrap, workspaces={"shell": {"sandbox": True}})
    with pytest.raises(ServerStartError) as info:
        required.start()
    assert "workspaces.shell.sandbox is true but the sandbox cannot run here" in str(info.value)
    assert "bubblewrap (bwrap) is not installed" in str(info.value)
