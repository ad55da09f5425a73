"""The TUI app on recorded pipeline and sub-agent events, and the new
``toolrelay tui`` flags: no server (the server side is built in parallel);
a stand-in client replays envelopes through the real app and widgets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace, TracebackType
from typing import Any, cast

import pytest

from clients.sdk import AnyEvent, ConnectionState, ToolrelayClient, parse_event
from clients.tui.app import ToolrelayTUI
from clients.tui.cli import _parser, run, session_options
from clients.tui.widgets import ConfirmationScreen, EntryView
from tests.clients.test_tui_live import SIZE, until

CHILD = "ses_child"


class ReplayStream:
    """Hands out the recorded events, then waits (as a quiet live stream does)."""

    def __init__(self, events: list[AnyEvent], on_state: Callable[..., None]) -> None:
        self._events = events
        self._on_state = on_state

    async def __aenter__(self) -> ReplayStream:
        self._on_state(ConnectionState.CONNECTED, "")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def __aiter__(self) -> AsyncIterator[AnyEvent]:
        for event in self._events:
            yield event
        await asyncio.Event().wait()  # cancelled when the app exits


class ReplayClient:
    """The few client calls the app makes, recorded."""

    def __init__(self, events: list[AnyEvent]) -> None:
        self._events = events
        self.answers: list[tuple[str, str, str, str, str]] = []
        self.created: list[dict[str, Any]] = []

    async def get_session(self, session_id: str) -> Any:
        return SimpleNamespace(id=session_id)

    async def create_session(self, workspace: str, **options: Any) -> Any:
        self.created.append({"workspace": workspace, **options})
        return SimpleNamespace(id="ses_parent")

    def events(self, session_id: str, **kwargs: Any) -> ReplayStream:
        return ReplayStream(self._events, kwargs["on_state"])

    async def answer_confirmation(
        self, session_id: str, turn_id: str, request_id: str, decision: str, *, scope: str
    ) -> Any:
        self.answers.append((session_id, turn_id, request_id, decision, scope))
        return SimpleNamespace(decision=decision, scope=scope)

    async def aclose(self) -> None:
        return None


def envelopes(raw: list[tuple[str, str | None, dict[str, Any]]]) -> list[AnyEvent]:
    return [
        parse_event(
            {
                "seq": n,
                "session_seq": n,
                "id": f"evt_{n}",
                "type": type_,
                "session_id": "ses_parent",
                "turn_id": turn,
                "ts": "2026-01-01T00:00:00Z",
                "data": data,
            }
        )
        for n, (type_, turn, data) in enumerate(raw, 1)
    ]


def sub(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "subagent_session_id": CHILD, "agent_type": "explore"}


DISPATCH = {
    "type": "tool_use",
    "id": "tu_d",
    "name": "dispatch_subagent",
    "input": {"task": "map the config", "agent_type": "explore"},
}
ASK = {
    "request_id": "c1",
    "tool_use_id": "tu_w",
    "tool_name": "shell",
    "side_effects": "execute",
    "rating": "dev",
    "input_summary": "pytest -q",
    "projected_modifications": [],
    "preview": {"kind": "command", "text": "pytest -q"},
    "expires_at": "2999-01-01T00:00:00Z",
}
RECORDED: list[tuple[str, str | None, dict[str, Any]]] = [
    ("turn.started", "t1", {}),
    ("message.completed", "t1", {"message": {"role": "assistant", "content": [DISPATCH]}}),
    (
        "hook.completed",
        "t1",
        {
            "hook": "audit",
            "event": "pre_tool_use",
            "decision": "allow",
            "exit_code": 0,
            "duration_ms": 3.0,
            "tool_use_id": "tu_d",
        },
    ),
    ("turn.started", "t_child", sub({})),
    (
        "tool.planned",
        "t_child",
        sub(
            {
                "tool_use_id": "tu_p",
                "tool_name": "write_file",
                "summary": "write_file a.txt (+1 lines)",
                "input": {},
            }
        ),
    ),
    ("tool.confirmation_requested", "t_child", sub(ASK)),
    ("something.new", "t1", {"n": 1}),
]


async def test_sub_agent_nests_and_its_confirmation_is_answered_at_its_session() -> None:
    client = ReplayClient(envelopes(RECORDED))
    app = ToolrelayTUI(cast(ToolrelayClient, client), session_id="ses_parent")
    async with app.run_test(size=SIZE) as pilot:
        screen = await until(
            pilot,
            lambda: app.screen if isinstance(app.screen, ConfirmationScreen) else None,
            "the sub-agent's question pops up",
        )
        assert screen.session_id == CHILD and screen.label == "sub-agent explore"
        await pilot.press("y")
        await until(pilot, lambda: client.answers, "answer sent")
        assert client.answers == [(CHILD, "t_child", "c1", "allow", "once")]
        view = app.entry_view("tool:tu_d")
        assert view is not None
        lines = view.plain.splitlines()
        assert "   hook audit (pre_tool_use): allow, exit 0 · 3 ms" in lines
        assert "   ⤷ sub-agent explore · ses_child · running" in lines
        assert "   ┆ ◇ write_file a.txt (+1 lines)  planned (dry-run, not run)" in lines
        assert app.transcript.turn_status == "running"  # the child's turn is its own
        notes = [v.plain for v in app.query(EntryView).results() if "something.new" in v.plain]
        assert notes == ["· something.new: n=1"]


async def test_a_created_session_gets_profile_agent_and_dry_run() -> None:
    client = ReplayClient(envelopes([("turn.started", "t1", {})]))
    options = {"profile": "read-only", "agent": "plan", "dry_run": True}
    app = ToolrelayTUI(cast(ToolrelayClient, client), workspace="/w", session_options=options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session_id, "session created")
    assert client.created == [{"workspace": "/w", **options}]


def test_session_flags_are_sent_only_when_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = _parser()
    assert session_options(parser.parse_args(["--workspace", "/w"])) == {}
    given = parser.parse_args(
        ["--workspace", "/w", "--profile", "ci", "--agent", "review", "--dry-run"]
    )
    assert session_options(given) == {"profile": "ci", "agent": "review", "dry_run": True}
    # An existing session keeps what it was created with: refused before any connection.
    assert run(["--session", "ses_x", "--token", "t" * 24, "--dry-run", "--agent", "x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "toolrelay tui: --agent, --dry-run apply to a new session (--workspace)"
    )
