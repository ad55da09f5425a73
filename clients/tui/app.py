"""The Textual app: a live transcript of one session, with approvals and input.

It attaches to a session (or creates one for a workspace), replays the
session's events from the start and follows them live through the SDK's
resumable stream, so a server restart shows as "reconnecting" and then
continues exactly where it stopped. Actions go over HTTP through the SDK.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Input

from clients.sdk import (
    AlreadyResolved,
    Backoff,
    ConnectionState,
    ToolrelayClient,
    ToolrelayError,
)
from clients.sdk.errors import StreamError
from clients.tui.transcript import PendingRequest, Transcript
from clients.tui.widgets import ConfirmationScreen, EntryView, StatusLine, is_expandable

# Keep reconnecting for a long while (about an hour at the 3 s cap) before
# giving up; the budget refills whenever the server delivers an event.
DEFAULT_STREAM_BACKOFF = Backoff(attempts=1200, initial=0.2, factor=1.6, max_delay=3.0)

# The input's placeholder; the footer lists the keys.
HELP = (
    "Message to the model, /tool NAME {json input} to run one tool, "
    "/dry-run before either to plan only (Enter sends)"
)
# Prefix of a per-turn dry-run: the turn's writes and commands are planned, not run.
DRY_RUN = "/dry-run"


class ToolrelayTUI(App[int]):
    """Attach to one session: transcript, confirmations, input, cancel."""

    TITLE = "toolrelay"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+t", "cancel_turn", "Cancel turn", priority=True),
        Binding("ctrl+o", "show_confirmation", "Answer confirmation", priority=True),
        Binding("ctrl+e", "toggle_results", "Expand results", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]
    CSS = """
    #transcript { height: 1fr; }
    #prompt { dock: bottom; margin: 0 0 1 0; }
    """

    def __init__(
        self,
        client: ToolrelayClient,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        stream_backoff: Backoff = DEFAULT_STREAM_BACKOFF,
        close_client: bool = False,
        session_options: dict[str, Any] | None = None,
    ) -> None:
        if (session_id is None) == (workspace is None):
            raise ValueError("give exactly one of session_id or workspace")
        super().__init__()
        self.client = client
        self.session_id = session_id
        self._workspace = workspace
        self._stream_backoff = stream_backoff
        self._close_client = close_client
        # profile / agent / dry_run for a session this app creates (only those set).
        self._session_options = dict(session_options or {})
        self.transcript = Transcript(session_id=session_id)
        self.connection = ConnectionState.CONNECTING
        self.last_error = ""
        self._views: dict[str, EntryView] = {}
        self._snoozed: set[str] = set()
        self._answering: set[str] = set()
        self._shown: ConfirmationScreen | None = None

    # -- layout -------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield StatusLine()
        yield VerticalScroll(id="transcript")
        yield Input(placeholder=HELP, id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(StatusLine).refresh_line()
        self.query_one("#prompt", Input).focus()
        self.run_worker(self._follow(), name="events", exclusive=True, exit_on_error=False)

    async def on_unmount(self) -> None:
        if self._close_client:
            await self.client.aclose()

    # -- the event stream -----------------------------------------------------------

    async def _follow(self) -> None:
        try:
            if self.session_id is None:
                assert self._workspace is not None
                session = await self.client.create_session(self._workspace, **self._session_options)
                self.session_id = session.id
                self.transcript.session_id = session.id
            else:
                await self.client.get_session(self.session_id)
            self.sub_title = self.session_id
            status = self.query_one(StatusLine)
            status.session_id = self.session_id
            status.refresh_line()
            stream = self.client.events(
                self.session_id, after=0, backoff=self._stream_backoff, on_state=self._on_state
            )
            async with stream:
                async for event in stream:
                    changed = self.transcript.apply(event)
                    await self._redraw(changed)
                    self._sync_confirmation()
        except (ToolrelayError, StreamError) as exc:
            self.last_error = exc.message
            self._on_state(ConnectionState.CLOSED, exc.message)
            self.notify(exc.message, title="stream stopped", severity="error", timeout=30)

    def _on_state(self, state: ConnectionState, detail: str) -> None:
        self.connection = state
        status = self.query_one(StatusLine)
        status.connection = state
        status.detail = "" if state is ConnectionState.CONNECTED else detail[:120]
        status.refresh_line()

    async def _redraw(self, keys: list[str]) -> None:
        container = self.query_one("#transcript", VerticalScroll)
        for key in dict.fromkeys(keys):
            entry = self.transcript.entry(key)
            if entry is None:
                continue
            view = self._views.get(key)
            if view is None:
                view = EntryView(entry, id=f"entry-{len(self._views) + 1}")
                self._views[key] = view
                await container.mount(view)
            else:
                view.show(entry)
        if keys:
            container.scroll_end(animate=False)
        status = self.query_one(StatusLine)
        status.turn_status = self.transcript.turn_status
        status.pending = len(self.transcript.pending)
        status.refresh_line()

    def entry_view(self, key: str) -> EntryView | None:
        """The widget showing transcript entry ``key`` (for tests and tooling)."""
        return self._views.get(key)

    def action_toggle_results(self) -> None:
        """Expand every collapsed tool result, or collapse them all if none is.
        (One result: tab to it, then enter or space; or click it.)"""
        views = [v for v in self._views.values() if is_expandable(v.entry)]
        expand = any(not v.expanded for v in views)
        for view in views:
            view.set_expanded(expand)

    # -- confirmations ----------------------------------------------------------------

    def _sync_confirmation(self, *, force: bool = False) -> None:
        """Show the oldest unanswered request; close the pop-up if someone else answered."""
        shown = self._shown
        if shown is not None:
            if shown.request_id not in self.transcript.pending and shown is self.screen:
                self._shown = None
                shown.dismiss(None)
            else:
                return
        for request_id, waiting in self.transcript.pending.items():
            if request_id in self._answering or (request_id in self._snoozed and not force):
                continue
            self._open(waiting)
            return

    def _open(self, waiting: PendingRequest) -> None:
        screen = ConfirmationScreen(
            waiting.turn_id, waiting.data, session_id=waiting.session_id, label=waiting.label
        )
        self._shown = screen

        def answered(result: tuple[str, str] | None) -> None:
            if self._shown is screen:
                self._shown = None
            if result is None:
                if screen.request_id in self.transcript.pending:
                    self._snoozed.add(screen.request_id)
                return
            decision, scope = result
            self._answering.add(screen.request_id)
            self.run_worker(
                self._answer(screen.turn_id, screen.request_id, decision, scope, screen.session_id)
            )

        self.push_screen(screen, answered)

    async def _answer(
        self,
        turn_id: str,
        request_id: str,
        decision: str,
        scope: str,
        session_id: str | None = None,
    ) -> None:
        assert self.session_id is not None
        try:
            resolution = await self.client.answer_confirmation(
                session_id or self.session_id,
                turn_id,
                request_id,
                "allow" if decision == "allow" else "deny",
                scope="session" if scope == "session" else "once",
            )
            self.notify(f"{resolution.decision} ({resolution.scope})", title="answered")
        except AlreadyResolved as exc:
            winner = exc.resolution
            self.notify(
                f"already resolved by {winner.resolved_by}: {winner.decision}",
                title="too late",
                severity="warning",
            )
        except ToolrelayError as exc:
            self._answering.discard(request_id)
            self.notify(exc.message, title="answer failed", severity="error")
            self._sync_confirmation()

    def action_show_confirmation(self) -> None:
        """Re-open a request closed with escape."""
        if self._shown is None and not self.transcript.pending:
            self.notify("nothing awaits confirmation")
            return
        self._sync_confirmation(force=True)

    # -- input and turns ------------------------------------------------------------------

    async def on_input_submitted(self, submitted: Input.Submitted) -> None:
        text = submitted.value.strip()
        submitted.input.value = ""
        if not text or self.session_id is None:
            return
        try:
            text, dry_run = split_dry_run(text)
            if text.startswith("/tool"):
                name, tool_input = parse_tool_command(text)
                tool_use = {"id": "tu_" + secrets.token_hex(6), "name": name, "input": tool_input}
                await self.client.send_tool_uses(self.session_id, [tool_use], dry_run=dry_run)
            else:
                await self.client.send_message(self.session_id, text, dry_run=dry_run)
        except ValueError as exc:
            self.notify(str(exc), title="bad command", severity="error")
        except ToolrelayError as exc:
            self.notify(exc.message, title="not sent", severity="error")

    async def action_cancel_turn(self) -> None:
        turn_id = self.transcript.turn_id
        if self.session_id is None or turn_id is None or self.transcript.turn_status != "running":
            self.notify("no turn is running")
            return
        try:
            await self.client.cancel_turn(self.session_id, turn_id)
        except ToolrelayError as exc:
            self.notify(exc.message, title="cancel failed", severity="error")


def split_dry_run(text: str) -> tuple[str, bool]:
    """``/dry-run <message or /tool ...>`` -> (the rest, True); other text unchanged.

    Only this turn is a dry-run: the session keeps the mode it was created with.
    """
    head, *rest = text.split(None, 1)
    if head != DRY_RUN:
        return text, False
    if not rest:
        raise ValueError(f"usage: {DRY_RUN} <message>  or  {DRY_RUN} /tool NAME {{json input}}")
    return rest[0].strip(), True


def parse_tool_command(text: str) -> tuple[str, dict[str, object]]:
    """Split ``/tool NAME {json}`` into the tool name and its input object."""
    parts = text.split(None, 2)
    if len(parts) < 2 or parts[0] != "/tool":
        raise ValueError("usage: /tool NAME {json input}")
    raw = parts[2] if len(parts) == 3 else "{}"
    try:
        tool_input = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"tool input is not valid JSON: {exc}") from None
    if not isinstance(tool_input, dict):
        raise ValueError("tool input must be a JSON object")
    return parts[1], tool_input
