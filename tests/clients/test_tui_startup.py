"""`toolrelay tui` as a person starts it: in a real terminal (tmux) against
the real server.

Start-up problems print one line and exit non-zero before any screen opens
(1: try again later, 2: fix the command line); a failed turn's reason and
message show in the transcript; a confirmation shows its time left.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.sdk import ToolrelayClient, TurnEndedFailed
from tests.harness import REPO_ROOT, ServerProcess

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="needs tmux")


def tui_command(server_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "server.cli", "tui", "--url", server_url, *args]


async def run_tui(*args: str, token: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args,
        env={"TOOLRELAY_TOKEN": token, "PATH": "/usr/bin:/bin"},
        cwd=str(REPO_ROOT),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert out == b"", out  # no screen was drawn
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("toolrelay tui: "), err
    return lines[0]


async def test_wrong_token_is_one_line_and_exit_2(server: ServerProcess) -> None:
    code, err = await run_tui(
        *tui_command(server.base_url, "--session", "ses_x"), token="wrong-" + "x" * 20
    )
    assert code == 2
    assert "rejected the token" in one_line(err)


async def test_unknown_session_is_one_line_and_exit_2(server: ServerProcess) -> None:
    code, err = await run_tui(
        *tui_command(server.base_url, "--session", "ses_nope"), token=server.token
    )
    assert code == 2
    assert "no session ses_nope" in one_line(err)


async def test_server_down_is_one_line_and_exit_1() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, err = await run_tui(
        *tui_command(f"http://127.0.0.1:{port}", "--session", "ses_x"), token="t" * 20
    )
    assert code == 1
    assert f"cannot reach the server at http://127.0.0.1:{port}" in one_line(err)


class Tmux:
    """One tmux server of our own (its own socket), killed at the end."""

    def __init__(self) -> None:
        self.socket = f"toolrelay-test-{secrets.token_hex(4)}"

    def __call__(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run(
            [TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-J", "-t", "tui")

    def wait_for(self, text: str, within: float = 60.0) -> str:
        """The screen's words joined by single spaces (the TUI wraps long
        lines itself), once ``text`` is among them."""
        deadline = time.monotonic() + within
        screen = ""
        while time.monotonic() < deadline:
            screen = " ".join(self.screen().split())
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on the screen within {within:g} s:\n{screen}")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    mux = Tmux()
    try:
        yield mux
    finally:
        mux("kill-server")


@needs_tmux
async def test_tui_in_tmux_shows_why_a_turn_failed(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, tmux: Tmux
) -> None:
    script = workspace / "script.yaml"
    script.write_text("- Hello from the script.\n")
    session = await sdk.create_session(workspace, model=f"scripted:{script}")
    script.unlink()  # the model's script is gone: the next turn fails
    command = " ".join(tui_command(server.base_url, "--session", session.id))
    tmux(
        "new-session", "-d", "-s", "tui", "-x", "160", "-y", "45",
        "-e", f"TOOLRELAY_TOKEN={server.token}", "-c", str(REPO_ROOT), command,
    )  # fmt: skip
    await asyncio.to_thread(tmux.wait_for, "connected")
    tmux("send-keys", "-t", "tui", "hello", "Enter")
    screen = await asyncio.to_thread(tmux.wait_for, "cannot read script")
    assert "failed: model_error: model call 1 failed" in screen, screen

    # The turn record keeps the reason and message; the SDK raises them.
    turns = await sdk._get_json(f"/sessions/{session.id}/turns")
    record = turns["turns"][-1]
    turn_id = record["id"]
    assert record["status"] == "failed" and record["reason"] == "model_error"
    assert "cannot read script" in record["message"]
    assert (await sdk.get_turn(session.id, turn_id)).message == record["message"]
    with pytest.raises(TurnEndedFailed) as caught:
        await sdk.wait_for_turn(session.id, turn_id, within=60, raise_on_failure=True)
    assert caught.value.reason == "model_error"
    assert caught.value.failure and "cannot read script" in caught.value.failure
    assert caught.value.details.get("error_kind") == "config"
    assert "model_error: model call 1 failed" in str(caught.value)
    tmux("send-keys", "-t", "tui", "C-q")


@needs_tmux
async def test_tui_in_tmux_shows_time_left_on_a_confirmation(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path, tmux: Tmux
) -> None:
    session = await sdk.create_session(workspace)
    command = " ".join(tui_command(server.base_url, "--session", session.id))
    tmux(
        "new-session", "-d", "-s", "tui", "-x", "160", "-y", "45",
        "-e", f"TOOLRELAY_TOKEN={server.token}", "-c", str(REPO_ROOT), command,
    )  # fmt: skip
    await asyncio.to_thread(tmux.wait_for, "connected")
    tmux("send-keys", "-t", "tui", "write notes.txt: hello", "Enter")
    screen = await asyncio.to_thread(tmux.wait_for, "s left")
    assert " min " in screen, screen
    tmux("send-keys", "-t", "tui", "n")
    await asyncio.to_thread(tmux.wait_for, "user_denied")
    tmux("send-keys", "-t", "tui", "C-q")
    assert not (workspace / "notes.txt").exists()
