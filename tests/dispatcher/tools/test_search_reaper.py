"""grep's rg/grep die with the server, ``kill -9`` included, when they run
without a sandbox. (search_code starts no process: it matches in a thread.)

The "server" is a small Python process running the tool exactly as the
dispatcher does, with no sandbox; its child blocks (a fake ``rg`` that
sleeps, a regex worker stuck on a catastrophic pattern with a generous
per-file budget). The test kills the server with SIGKILL and waits (psutil,
bounded) for the child to be gone. A control run with the reaper switched
off shows the child would otherwise survive, so the test can tell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
WAIT = 60.0  # generous: polls return as soon as the state holds

FAKE_SERVER = """
import asyncio, sys
from dispatcher import WorkspaceFileAPI
from dispatcher.reaper import child_reaper
from dispatcher.tools.search.grep import GrepTool
from dispatcher.tools.search.search_code import SearchCodeTool
from tests.dispatcher.tools.support import make_context

tool_name, mode, workspace = sys.argv[1:4]
if mode == "control":
    # The reaper switched off: no marker, no tracked group.
    reaper = child_reaper()
    reaper.track = lambda pgid: None
    reaper.untrack = lambda pgid: None
    reaper.environment = lambda env: dict(env)

async def main() -> None:
    ws = WorkspaceFileAPI(workspace)
    if tool_name == "grep":
        tool, args, opts = GrepTool(), {"pattern": "needle"}, {"backend": "rg"}
    else:
        tool, args, opts = SearchCodeTool(), {"pattern": r"(a+)+$"}, {"file_timeout": 60}
    await tool.execute(args, make_context(ws, options=opts))

asyncio.run(main())
"""


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _search_child(server: psutil.Process, tool: str) -> psutil.Process | None:
    """The blocking child the tool started (never the reaper's watchdog)."""
    try:
        children = server.children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for child in children:
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if tool == "grep" and child.name() == "sleep":
            return child
        if (
            tool == "search_code"
            and "-c" in cmdline
            and not any("reaper_watch" in part for part in cmdline)
            # Busy on the slow line: it has its input, so the closing of its
            # stdin by the server's death would not end it by itself.
            and child.cpu_times().user > 0.2
        ):
            return child
    return None


@pytest.mark.parametrize("mode", ["reaper", "control"])
@pytest.mark.parametrize("tool", ["grep"])
def test_kill_9_of_the_server_ends_the_search_child(tool: str, mode: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "needle.txt").write_text("a needle\n")
    # Exponential for (a+)+$: the worker never finishes this line.
    (workspace / "slow.txt").write_text("a" * 64 + "b\n")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_rg = fake_bin / "rg"
    fake_rg.write_text("#!/bin/sh\nexec sleep 1000\n")
    fake_rg.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    }
    server = subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, tool, mode, str(workspace)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    child: psutil.Process | None = None
    try:
        watched = psutil.Process(server.pid)

        def found() -> bool:
            nonlocal child
            child = _search_child(watched, tool)
            return child is not None

        _wait_for(found, f"{tool}'s child process")
        assert child is not None
        server.send_signal(signal.SIGKILL)
        server.wait(WAIT)
        if mode == "control":
            time.sleep(0.5)
            assert not _gone(child), "without the reaper the child should have survived"
        else:
            stuck = child
            _wait_for(lambda: _gone(stuck), "the child to die with the server")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(WAIT)
        if child is not None and not _gone(child):
            child.kill()  # ours, by PID: what the control run (or a failure) left
