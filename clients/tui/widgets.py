"""The TUI's widgets: transcript entries, the status line, the confirmation pop-up."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from clients.sdk.events import ConfirmationRequestedData
from clients.sdk.stream import ConnectionState
from clients.tui.transcript import (
    Entry,
    MessageEntry,
    NoteEntry,
    SubagentRun,
    ToolCallEntry,
    time_left,
)

# Lines of streamed tool output shown under a running call; the transcript keeps more.
OUTPUT_TAIL_LINES = 12
# Lines of a result (or of a finished call's output) shown once expanded.
EXPANDED_MAX_LINES = 500
EXPAND_HINT = "enter/click: expand"
# A running sub-agent shows its latest entries; expanded, all of them.
SUBAGENT_LIVE_ENTRIES = 8
SUBAGENT_GUTTER = "   ┆ "
_UNFINISHED = frozenset({"requested", "awaiting_confirmation", "running"})

_STATUS_STYLE = {
    "requested": ("…", "dim"),
    "awaiting_confirmation": ("?", "bold yellow"),
    "running": ("▶", "cyan"),
    "completed": ("✔", "green"),
    "failed": ("✘", "red"),
    "invalid": ("✘", "red"),
    "cancelled": ("■", "yellow"),
    "planned": ("◇", "cyan"),
    "blocked": ("⊘", "bold red"),
}
# Statuses whose name alone would mislead a reader.
_STATUS_LABEL = {"planned": "planned (dry-run, not run)"}
_NOTE_STYLE = {"info": "dim", "ok": "green", "warn": "yellow", "error": "bold red"}
_SIDE_EFFECT_STYLE = {
    "none": "dim",
    "read": "blue",
    "write": "yellow",
    "execute": "magenta",
    "network": "red",
}


def render_entry(entry: Entry, *, expanded: bool = False) -> Text:
    """One transcript entry as styled text (its ``.plain`` is what tests read).

    A finished tool call is collapsed to a summary line unless ``expanded``."""
    if isinstance(entry, MessageEntry):
        text = Text()
        label = "you" if entry.role == "user" else entry.role
        text.append(f"{label}: ", style="bold cyan" if entry.role == "user" else "bold green")
        text.append(entry.text)
        if entry.streaming:
            text.append(" ▌", style="blink")
        return text
    if isinstance(entry, NoteEntry):
        style = _NOTE_STYLE.get(entry.level, "dim")
        text = Text(f"· {entry.text}", style=style)
        for line in entry.detail:
            text.append(f"\n   {line}", style="dim" if entry.level == "info" else style)
        return text
    return _render_call(entry, expanded)


def _render_call(call: ToolCallEntry, expanded: bool = False) -> Text:
    icon, style = _STATUS_STYLE.get(call.status, ("•", ""))
    text = Text()
    text.append(f"{icon} ", style=style)
    text.append(call.name, style="bold")
    if call.side_effects:
        text.append(f" [{call.side_effects}]", style=_SIDE_EFFECT_STYLE.get(call.side_effects, ""))
    if call.summary:
        text.append(f" {call.summary}")
    label = _STATUS_LABEL.get(call.status, call.status.replace("_", " "))
    text.append(f"  {label}", style=style)
    if call.duration_ms is not None:
        text.append(f" · {call.duration_ms:.1f} ms", style="dim")
    if call.resolution:
        text.append(f"\n   confirmation: {call.resolution}", style="dim")
    for note, level in call.notes:
        text.append(f"\n   {note}", style=_NOTE_STYLE.get(level, "dim"))
    if call.subagent is not None:
        _render_subagent(text, call.subagent, live=call.status in _UNFINISHED, expanded=expanded)
    output = call.output.rstrip("\n").splitlines()
    result = call.result.strip().splitlines() if call.status == "completed" else []
    if call.status in _UNFINISHED:
        # Live: the tail of what the call prints.
        _lines(text, output[-OUTPUT_TAIL_LINES:], "dim")
    elif expanded:
        # The whole result; the streamed output when there is no result to show.
        _lines(text, result or output, "green" if result else "dim")
    else:
        hidden = len(result) - 1 if result else len(output)
        if result:
            text.append(f"\n   → {result[0][:200]}", style="green")
        if hidden > 0 or (result and len(result[0]) > 200):
            more = f"+{hidden} line{'s' if hidden != 1 else ''} · " if hidden > 0 else ""
            # After the result's first line, or on a line of its own (only output).
            where = "  " if result else "\n   "
            text.append(f"{where}({more}{EXPAND_HINT})", style="dim")
    if call.error:
        text.append(f"\n   → {call.error}", style="red")
    return text


def _render_subagent(text: Text, run: SubagentRun, *, live: bool, expanded: bool) -> None:
    """The sub-agent's own transcript, indented under the call that started it:
    its latest steps while it works, all of them expanded, a count otherwise."""
    entries = run.transcript.entries
    text.append(f"\n   ⤷ {run.label} · {run.session_id}", style="bold magenta")
    text.append(f" · {run.transcript.turn_status}", style="dim")
    if expanded:
        shown = entries
    elif live:
        shown = entries[-SUBAGENT_LIVE_ENTRIES:]
    else:
        shown = []
    hidden = len(entries) - len(shown)
    if hidden and shown:
        text.append(f"\n{SUBAGENT_GUTTER}({hidden} earlier steps)", style="dim")
    for entry in shown:
        for line in render_entry(entry, expanded=expanded).split("\n", allow_blank=True):
            text.append("\n" + SUBAGENT_GUTTER, style="dim")
            text.append_text(line)
    if hidden and not shown:
        text.append(f"\n{SUBAGENT_GUTTER}({hidden} steps · {EXPAND_HINT})", style="dim")


def _lines(text: Text, lines: list[str], style: str) -> None:
    for line in lines[-EXPANDED_MAX_LINES:]:
        text.append(f"\n   │ {line}", style=style)
    if len(lines) > EXPANDED_MAX_LINES:
        text.append(
            f"\n   ({len(lines) - EXPANDED_MAX_LINES} earlier lines not shown)", style="dim"
        )


def is_expandable(entry: Entry) -> bool:
    """A finished tool call whose summary hides part of its result or output."""
    if not isinstance(entry, ToolCallEntry) or entry.status in _UNFINISHED:
        return False
    return render_entry(entry).plain != render_entry(entry, expanded=True).plain


class EntryView(Static):
    """Shows one transcript entry; ``plain`` holds its current text.

    A tool call's view is focusable (tab) and toggles between its summary line
    and its whole result with enter, space or a click."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "toggle_expanded", "Expand/collapse", show=False),
        Binding("space", "toggle_expanded", "Expand/collapse", show=False),
    ]
    DEFAULT_CSS = """
    EntryView { padding: 0 1; }
    EntryView:focus { background: $boost; }
    """

    def __init__(self, entry: Entry, *, id: str) -> None:
        self.plain = ""
        self.entry = entry
        self.expanded = False
        super().__init__(id=id)
        self.can_focus = isinstance(entry, ToolCallEntry)
        self.show(entry)

    def show(self, entry: Entry) -> None:
        self.entry = entry
        rendered = render_entry(entry, expanded=self.expanded)
        self.plain = rendered.plain
        self.update(rendered)

    def set_expanded(self, expanded: bool) -> None:
        if expanded != self.expanded:
            self.expanded = expanded
            self.show(self.entry)

    def action_toggle_expanded(self) -> None:
        self.set_expanded(not self.expanded)

    def on_click(self) -> None:
        if isinstance(self.entry, ToolCallEntry):
            self.action_toggle_expanded()


class StatusLine(Static):
    """Connection indicator, session, turn status and pending confirmations."""

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(id="status")
        self.plain = ""
        self.connection = ConnectionState.CONNECTING
        self.session_id = ""
        self.turn_status = "idle"
        self.pending = 0
        self.detail = ""

    def refresh_line(self) -> None:
        icon, style = {
            ConnectionState.CONNECTED: ("●", "green"),
            ConnectionState.CONNECTING: ("◌", "yellow"),
            ConnectionState.RECONNECTING: ("◌", "yellow"),
            ConnectionState.CLOSED: ("✕", "red"),
        }[self.connection]
        text = Text()
        text.append(f"{icon} {self.connection.value}", style=style)
        text.append(f"  session {self.session_id or '-'}")
        text.append(f"  turn: {self.turn_status}")
        if self.pending:
            text.append(f"  {self.pending} awaiting confirmation", style="bold yellow")
        if self.detail:
            text.append(f"  {self.detail}", style="dim")
        self.plain = text.plain
        self.update(text)


def _preview(data: ConfirmationRequestedData) -> RenderableType:
    if data.preview.kind == "diff":
        return Syntax(data.preview.text or "(no changes)", "diff", word_wrap=True)
    if data.preview.kind == "command":
        return Syntax(data.preview.text, "bash", word_wrap=True)
    return Text(data.preview.text)


class ConfirmationScreen(ModalScreen[tuple[str, str] | None]):
    """Pops up for a pending request: y allows once, s allows for the session,
    n denies, escape closes it unanswered (ctrl+o brings it back)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('allow', 'once')", "Allow"),
        Binding("s", "answer('allow', 'session')", "Allow for session"),
        Binding("n", "answer('deny', 'once')", "Deny"),
        Binding("escape", "later", "Later"),
    ]
    DEFAULT_CSS = """
    ConfirmationScreen { align: center middle; }
    ConfirmationScreen > Vertical {
        width: 90%; max-width: 120; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 1 2;
    }
    ConfirmationScreen #confirm-preview { height: auto; max-height: 24; }
    ConfirmationScreen #confirm-keys { margin-top: 1; }
    """

    def __init__(
        self,
        turn_id: str,
        data: ConfirmationRequestedData,
        *,
        session_id: str | None = None,
        label: str = "",
    ) -> None:
        super().__init__(id="confirmation")
        self.turn_id = turn_id
        self.data = data
        self.request_id = data.request_id
        # Set when a sub-agent asks: the answer goes to its own session.
        self.session_id = session_id
        self.label = label

    def compose(self) -> ComposeResult:
        data = self.data
        head = Text()
        if self.label:
            head.append(f"{self.label} asks: ", style="bold magenta")
        head.append("Allow ", style="bold")
        head.append(data.tool_name, style="bold yellow")
        head.append(f" [{data.side_effects}]?\n", style="bold")
        head.append(data.input_summary)
        if data.projected_modifications:
            head.append("\nwould modify: " + ", ".join(data.projected_modifications), style="dim")
        keys = Text.assemble(
            ("y", "bold green"),
            " allow  ",
            ("s", "bold green"),
            " allow for session  ",
            ("n", "bold red"),
            " deny  ",
            ("esc", "bold"),
            " later",
        )
        if data.scope_text:
            # Say exactly what "s" grants: for a shell, one program and
            # subcommand at one rating, not every later command.
            keys.append(f"\n s = {data.scope_text}", style="dim")
        with Vertical():
            yield Static(head, id="confirm-head")
            yield Static(self._expiry(), id="confirm-expiry")
            with VerticalScroll(id="confirm-preview"):
                yield Static(Group(_preview(data)), id="confirm-preview-text")
            yield Static(keys, id="confirm-keys")

    def _expiry(self) -> Text:
        return Text(time_left(self.data.expires_at), style="dim")

    def on_mount(self) -> None:
        # The time left counts down while the pop-up is open.
        self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        self.query_one("#confirm-expiry", Static).update(self._expiry())

    def action_answer(self, decision: str, scope: str) -> None:
        self.dismiss((decision, scope))

    def action_later(self) -> None:
        self.dismiss(None)
