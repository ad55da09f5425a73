"""The TUI driven by Textual's pilot against the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Static

from clients.sdk import Backoff, ConnectionState, ToolrelayClient
from clients.tui.app import ToolrelayTUI
from clients.tui.cli import BadUsage, resolve_token, run
from clients.tui.transcript import MessageEntry, ToolCallEntry
from clients.tui.widgets import ConfirmationScreen, StatusLine
from tests.clients.conftest import WRITE_A
from tests.harness import REPO_ROOT, ServerProcess

FAST_RECONNECT = Backoff(attempts=300, initial=0.05, factor=1.5, max_delay=0.4)
SIZE = (120, 40)


async def until(pilot: Pilot[Any], check: Callable[[], Any], what: str, within: float = 60) -> Any:
    """Let the app run until ``check()`` is truthy (bounded generously: a busy
    machine is slow, and a passing test does not wait for the bound)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        value = check()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"TUI never reached: {what}")


class StateRecordingTUI(ToolrelayTUI):
    """The TUI, keeping every connection state its stream reports, so a test
    sees a state however briefly it lasted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.states: list[ConnectionState] = []

    def _on_state(self, state: ConnectionState, detail: str) -> None:
        self.states.append(state)
        super()._on_state(state, detail)


def tool_entry(app: ToolrelayTUI, tool_use_id: str) -> ToolCallEntry | None:
    entry = app.transcript.entry(f"tool:{tool_use_id}")
    return entry if isinstance(entry, ToolCallEntry) else None


def tui_client(server: ServerProcess, name: str = "tui") -> ToolrelayClient:
    return ToolrelayClient(server.base_url, server.token, client_name=name)


async def test_tui_creates_a_session_and_approves_with_y(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, workspace=str(workspace), stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            session_id = await until(pilot, lambda: app.session_id, "session created")
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            turn_id = await sdk.send_tool_uses(session_id, [WRITE_A])
            screen = await until(
                pilot,
                lambda: app.screen if isinstance(app.screen, ConfirmationScreen) else None,
                "confirmation pop-up",
            )
            assert screen.data.tool_name == "write_file" and screen.turn_id == turn_id
            assert "+hi" in screen.data.preview.text
            # The pop-up says what "s" (allow for session) would grant.
            assert screen.data.scope_text == "allow write_file for this session"
            keys = screen.query_one("#confirm-keys", Static).render()
            assert "s = allow write_file for this session" in str(keys)
            await pilot.press("y")
            call = await until(
                pilot,
                lambda: (c := tool_entry(app, "tu1")) and c.status == "completed" and c,
                "tool call completed",
            )
            assert call.resolution == "allow by tui"
            assert call.duration_ms is not None
            view = app.entry_view("tool:tu1")
            assert view is not None and "completed" in view.plain and "ms" in view.plain
            await until(pilot, lambda: app.transcript.turn_status == "completed", "turn done")
            assert "turn: completed" in app.query_one(StatusLine).plain
    assert (workspace / "a.txt").read_text() == "hi"


async def test_tui_message_drives_the_scripted_model(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    """A typed message goes to the model (the offline scripted one here); its tool
    call asks for approval, and the streamed replies land in the transcript."""
    session = await sdk.create_session(workspace)
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            await pilot.click("#prompt")
            await pilot.press(*"write notes.txt:", "space", *"hello", "enter")
            screen = await until(
                pilot,
                lambda: app.screen if isinstance(app.screen, ConfirmationScreen) else None,
                "pop-up for the model's write",
            )
            assert screen.data.tool_name == "write_file"
            assert screen.data.projected_modifications == ["notes.txt"]
            await pilot.press("y")
            await until(pilot, lambda: app.transcript.turn_status == "completed", "turn done")
            messages = [
                (e.role, e.text, e.streaming)
                for e in app.transcript.entries
                if isinstance(e, MessageEntry)
            ]
            assert messages[0] == ("user", "write notes.txt: hello", False)
            replies = [m for m in messages if m[0] == "assistant"]
            assert len(replies) == 2 and not any(m[2] for m in replies)
            assert all(m[1] for m in replies)
    assert (workspace / "notes.txt").read_text() == "hello"


async def test_tui_sends_tool_commands_closes_popup_and_cancels(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    session = await sdk.create_session(workspace)
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            prompt = app.query_one("#prompt", Input)
            prompt.value = '/tool write_file {"path": "b.txt", "content": "yo"'
            await pilot.click("#prompt")
            await pilot.press("end", "}", "enter")  # typed keys reach the same input
            await until(pilot, lambda: isinstance(app.screen, ConfirmationScreen), "pop-up")
            await pilot.press("escape")  # later: the request stays pending
            await until(pilot, lambda: not isinstance(app.screen, ConfirmationScreen), "closed")
            assert len(app.transcript.pending) == 1
            await pilot.press("ctrl+o")  # brings it back
            await until(pilot, lambda: isinstance(app.screen, ConfirmationScreen), "re-opened")
            await pilot.press("escape")
            await pilot.press("ctrl+t")  # cancel the turn
            await until(pilot, lambda: app.transcript.turn_status == "cancelled", "cancelled")
            assert app.transcript.pending == {}
    assert not (workspace / "b.txt").exists()


async def test_tool_results_collapse_to_a_line_and_expand(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    """A finished call shows its result's first line and how much more there is;
    a click, enter on the focused call, or ctrl+e (all of them) expands it."""
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 31)))
    session = await sdk.create_session(workspace)
    read = {"id": "tu_long", "name": "read_file", "input": {"path": "long.txt"}}
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            await sdk.send_tool_uses(session.id, [read])
            await until(pilot, lambda: app.transcript.turn_status == "completed", "turn done")
            view = app.entry_view("tool:tu_long")
            assert view is not None
            collapsed = view.plain
            assert "→ line 1" in collapsed and "+29 lines" in collapsed, collapsed
            assert "line 30" not in collapsed and len(collapsed.splitlines()) == 2

            await pilot.click(f"#{view.id}")
            await until(pilot, lambda: "line 30" in view.plain, "expanded by a click")
            assert all(f"│ line {i}" in view.plain for i in (1, 15, 30)), view.plain
            await pilot.click(f"#{view.id}")
            await until(pilot, lambda: view.plain == collapsed, "collapsed by a click")

            view.focus()  # as tab would
            await pilot.press("enter")
            await until(pilot, lambda: "line 30" in view.plain, "expanded by enter")
            await pilot.press("ctrl+e")  # none collapsed: collapse all
            await until(pilot, lambda: view.plain == collapsed, "collapsed by ctrl+e")
            await pilot.press("ctrl+e")
            await until(pilot, lambda: "line 30" in view.plain, "expanded by ctrl+e")


async def test_popup_closes_when_another_client_answers(
    server: ServerProcess, sdk: ToolrelayClient, workspace: Path
) -> None:
    session = await sdk.create_session(workspace)
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
            screen = await until(
                pilot,
                lambda: app.screen if isinstance(app.screen, ConfirmationScreen) else None,
                "pop-up",
            )
            await sdk.allow(session.id, turn_id, screen.request_id, scope="session")
            await until(pilot, lambda: not isinstance(app.screen, ConfirmationScreen), "closed")
            call = await until(
                pilot, lambda: (c := tool_entry(app, "tu1")) and c.resolution and c, "resolved"
            )
            assert call.resolution == "allow for the session by sdk-test"


async def test_tui_reconnects_and_resumes_after_server_restart(
    own_server: ServerProcess, own_sdk: ToolrelayClient, workspace: Path
) -> None:
    server, sdk = own_server, own_sdk  # this test restarts its server
    session = await sdk.create_session(workspace)
    async with tui_client(server) as client:
        app = StateRecordingTUI(client, session_id=session.id, stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.connection is ConnectionState.CONNECTED, "connected")
            connected_before = len(app.states)
            await asyncio.to_thread(server.restart)
            # The stream may notice the restart only once the new server is up:
            # wait for its reconnect, not for a state seen during the restart.
            await until(
                pilot,
                lambda: (
                    ConnectionState.RECONNECTING in app.states[connected_before:]
                    and app.connection is ConnectionState.CONNECTED
                ),
                "reconnected",
            )
            turn_id = await sdk.send_tool_uses(session.id, [WRITE_A])
            screen = await until(
                pilot,
                lambda: app.screen if isinstance(app.screen, ConfirmationScreen) else None,
                "pop-up after restart",
            )
            assert screen.turn_id == turn_id
            await pilot.press("s")
            await until(
                pilot,
                lambda: (c := tool_entry(app, "tu1")) and c.status == "completed",
                "completed after restart",
            )
            entries = [e.key for e in app.transcript.entries]
            assert len(entries) == len(set(entries))
            starts = [k for k in entries if k.startswith("note:")]
            assert starts  # turn notes were drawn once each
    assert ConnectionState.RECONNECTING in app.states[connected_before:]
    assert (workspace / "a.txt").read_text() == "hi"


async def test_tui_shows_stream_failure_for_unknown_session(server: ServerProcess) -> None:
    async with tui_client(server) as client:
        app = ToolrelayTUI(client, session_id="ses_nope", stream_backoff=FAST_RECONNECT)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.last_error, "error shown")
            assert "ses_nope" in app.last_error
            assert app.connection is ConnectionState.CLOSED


def test_token_resolution_order(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    assert resolve_token("explicit", str(tmp_path), env={"TOOLRELAY_TOKEN": "env"}) == "explicit"
    assert resolve_token(None, str(tmp_path), env={"TOOLRELAY_TOKEN": "env"}) == "env"
    assert resolve_token(None, str(tmp_path), env={}) == "from-file"
    with pytest.raises(BadUsage, match="could not read"):
        resolve_token(None, str(tmp_path / "missing"), env={})


def test_run_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["--token", "t" * 20, "--url", "ftp://x", "--session", "ses_x"])
    assert code == 2 and "http://" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(["--token", "t" * 20])  # neither --session nor --workspace


async def test_server_cli_starts_the_tui(server: ServerProcess, workspace: Path) -> None:
    """`toolrelay tui` reaches our entry point (the server's CLI imports it lazily)."""
    proc = await asyncio.create_subprocess_exec(
        *server.command()[:3],
        "tui",
        "--url",
        server.base_url,
        "--workspace",
        str(workspace / "missing"),
        env={"TOOLRELAY_TOKEN": server.token, "PATH": "/usr/bin:/bin"},
        cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    # The workspace is a path on the server: the server refuses it, in one line.
    assert proc.returncode == 2, err
    assert b"does not exist" in err and b"missing" in err
    assert len(err.decode().strip().splitlines()) == 1, err
