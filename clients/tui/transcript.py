"""What the TUI knows about a session, rebuilt from its event stream.

This module holds no widgets: :class:`Transcript` folds typed events into
entries (messages, tool calls, notes) and the set of pending confirmations,
and tells the caller which entry changed, so the app only redraws that one.
Keeping it free of Textual makes the folding rules easy to read and test.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from clients.sdk.events import (
    AnyEvent,
    ConfirmationRequested,
    ConfirmationRequestedData,
    ConfirmationResolved,
    MessageCompleted,
    MessageDelta,
    SessionDeleted,
    ToolCalled,
    ToolCompleted,
    ToolFailed,
    ToolInputInvalid,
    ToolOutputDelta,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)

# Streamed output kept per tool call; older text is dropped (the server keeps it all).
MAX_OUTPUT_CHARS = 20_000


@dataclass(slots=True)
class MessageEntry:
    """A user or assistant message (assistant text may still be streaming)."""

    key: str
    role: str
    text: str
    streaming: bool = False


@dataclass(slots=True)
class ToolCallEntry:
    """One tool call and everything the stream told about it.

    ``status`` moves through requested -> awaiting_confirmation -> running ->
    completed | failed | invalid.
    """

    key: str
    tool_use_id: str
    name: str
    summary: str = ""
    side_effects: str = ""
    status: str = "requested"
    duration_ms: float | None = None
    output: str = ""
    result: str = ""
    error: str = ""
    resolution: str = ""


@dataclass(slots=True)
class NoteEntry:
    """A one-line note: a turn started or ended, a confirmation resolved."""

    key: str
    text: str
    level: str = "info"  # "info" | "ok" | "warn" | "error"


Entry = MessageEntry | ToolCallEntry | NoteEntry


@dataclass(slots=True)
class PendingRequest:
    """A confirmation request nobody has answered yet."""

    turn_id: str
    data: ConfirmationRequestedData


def _text_of(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def summarize_input(tool_input: dict[str, Any], limit: int = 80) -> str:
    """A short one-line rendering of a tool input for the transcript."""
    for key in ("command", "path", "pattern", "url"):
        value = tool_input.get(key)
        if isinstance(value, str):
            return value if len(value) <= limit else value[: limit - 1] + "…"
    text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_expired(expires_at: str, now: datetime | None = None) -> bool:
    """Whether an RFC 3339 deadline has passed (unparseable counts as not expired)."""
    try:
        deadline = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return False
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return deadline <= (now or datetime.now(UTC))


def time_left(expires_at: str, now: datetime | None = None) -> str:
    """What a person reads: ``4 min 05 s left``, ``12 s left``, ``expired``."""
    try:
        deadline = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return f"expires {expires_at}"
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    seconds = math.ceil((deadline - (now or datetime.now(UTC))).total_seconds())
    if seconds <= 0:
        return "expired"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest:02d} s left" if minutes else f"{rest} s left"


@dataclass(slots=True)
class Transcript:
    """The folded state of one session's stream."""

    entries: list[Entry] = field(default_factory=list)
    pending: dict[str, PendingRequest] = field(default_factory=dict)
    turn_id: str | None = None
    turn_status: str = "idle"
    deleted: bool = False
    _by_key: dict[str, Entry] = field(default_factory=dict)
    _notes: int = 0
    _streaming: str | None = None  # key of the assistant message being streamed

    # -- entry helpers ---------------------------------------------------------

    def entry(self, key: str) -> Entry | None:
        return self._by_key.get(key)

    def _add(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self._by_key[entry.key] = entry
        return entry

    def _note(self, text: str, level: str = "info") -> str:
        self._notes += 1
        key = f"note:{self._notes}"
        self._add(NoteEntry(key, text, level))
        return key

    def _tool(self, tool_use_id: str, name: str) -> ToolCallEntry:
        key = f"tool:{tool_use_id}"
        found = self._by_key.get(key)
        if isinstance(found, ToolCallEntry):
            return found
        entry = ToolCallEntry(key=key, tool_use_id=tool_use_id, name=name)
        self._add(entry)
        return entry

    def tool_calls(self) -> list[ToolCallEntry]:
        return [e for e in self.entries if isinstance(e, ToolCallEntry)]

    # -- folding -----------------------------------------------------------------

    def apply(self, event: AnyEvent) -> list[str]:
        """Fold one event in; returns the keys of the entries it added or changed."""
        if isinstance(event, TurnStarted):
            self.turn_id, self.turn_status = event.turn_id, "running"
            return [self._note(f"turn {event.turn_id} started")]
        if isinstance(event, TurnCompleted | TurnFailed | TurnCancelled):
            return self._turn_ended(event)
        if isinstance(event, MessageDelta):
            return self._delta(event)
        if isinstance(event, MessageCompleted):
            return self._message(event)
        if isinstance(event, ConfirmationRequested):
            return self._requested(event)
        if isinstance(event, ConfirmationResolved):
            return self._resolved(event)
        if isinstance(event, ToolCalled):
            call = self._tool(event.data.tool_use_id, event.data.tool_name)
            call.side_effects = event.data.side_effects
            call.summary = call.summary or summarize_input(event.data.input)
            call.status = "running"
            return [call.key]
        if isinstance(event, ToolOutputDelta):
            call = self._tool(event.data.tool_use_id, "?")
            call.output = (call.output + event.data.text)[-MAX_OUTPUT_CHARS:]
            return [call.key]
        if isinstance(event, ToolCompleted):
            call = self._tool(event.data.tool_use_id, event.data.tool_name)
            call.status, call.duration_ms = "completed", event.data.duration_ms
            call.result = _text_of(event.data.content)
            return [call.key]
        if isinstance(event, ToolFailed):
            call = self._tool(event.data.tool_use_id, event.data.tool_name)
            call.status, call.duration_ms = "failed", event.data.duration_ms
            call.error = f"{event.data.error_class}: {event.data.message}"
            return [call.key]
        if isinstance(event, ToolInputInvalid):
            call = self._tool(event.data.tool_use_id, event.data.tool_name)
            call.status = "invalid"
            call.error = "; ".join(
                f"{e.get('path', '')}: {e.get('message', '')}" for e in event.data.errors
            )
            return [call.key]
        if isinstance(event, SessionDeleted):
            self.deleted = True
            self.pending.clear()
            return [self._note("session deleted", "warn")]
        return []

    def _turn_ended(self, event: TurnCompleted | TurnFailed | TurnCancelled) -> list[str]:
        status = event.type.split(".", 1)[1]
        if event.turn_id == self.turn_id or self.turn_id is None:
            self.turn_status = status
        # A finished turn's requests can no longer be answered.
        for request_id, waiting in list(self.pending.items()):
            if waiting.turn_id == event.turn_id:
                del self.pending[request_id]
        changed: list[str] = []
        for call in self.tool_calls():
            if call.status in ("requested", "awaiting_confirmation", "running"):
                call.status = status if status != "completed" else call.status
                changed.append(call.key)
        for entry in self.entries:
            if isinstance(entry, MessageEntry) and entry.streaming:
                entry.streaming = False
                changed.append(entry.key)
        self._streaming = None
        reason = f" ({event.data.reason})" if event.data.reason else ""
        if status == "failed" and event.data.message:
            # The whole story: "model_error: model call 1 failed: anthropic: auth ..."
            reason = f": {event.data.reason or 'failed'}: {event.data.message}"
        level = {"completed": "ok", "failed": "error", "cancelled": "warn"}[status]
        changed.append(self._note(f"turn {event.turn_id} {status}{reason}", level))
        return changed

    def _delta(self, event: MessageDelta) -> list[str]:
        live = self._by_key.get(self._streaming) if self._streaming else None
        if isinstance(live, MessageEntry) and live.streaming:
            live.text += event.data.text
            return [live.key]
        # The first fragment of a new assistant message.
        self._streaming = f"stream:{event.seq}"
        self._add(MessageEntry(self._streaming, "assistant", event.data.text, streaming=True))
        return [self._streaming]

    def _message(self, event: MessageCompleted) -> list[str]:
        message = event.data.message
        role = str(message.get("role", "?"))
        blocks = [b for b in message.get("content", []) if isinstance(b, dict)]
        text = _text_of(blocks)
        changed: list[str] = []
        live = self._by_key.get(self._streaming) if self._streaming else None
        if role == "assistant" and isinstance(live, MessageEntry):
            # The streamed fragments already show this message; settle it whole.
            self._streaming = None
            live.text, live.streaming = text or live.text, False
            changed.append(live.key)
        elif role in ("user", "assistant") and text:
            key = f"msg:{event.seq}"
            self._add(MessageEntry(key, role, text))
            changed.append(key)
        if role == "assistant":
            # Tool calls show under the text that announced them.
            for block in blocks:
                if block.get("type") == "tool_use":
                    call = self._tool(str(block.get("id")), str(block.get("name")))
                    tool_input = block.get("input")
                    if isinstance(tool_input, dict) and not call.summary:
                        call.summary = summarize_input(tool_input)
                    changed.append(call.key)
        return changed

    def _requested(self, event: ConfirmationRequested) -> list[str]:
        data = event.data
        call = self._tool(data.tool_use_id, data.tool_name)
        call.status, call.side_effects = "awaiting_confirmation", data.side_effects
        call.summary = call.summary or data.input_summary
        if event.turn_id is not None and not is_expired(data.expires_at):
            self.pending[data.request_id] = PendingRequest(event.turn_id, data)
        return [call.key]

    def _resolved(self, event: ConfirmationResolved) -> list[str]:
        data = event.data
        self.pending.pop(data.request_id, None)
        scope = " for the session" if data.scope == "session" else ""
        text = f"{data.decision}{scope} by {data.resolved_by}"
        if data.message:
            text += f": {data.message}"
        changed: list[str] = []
        if data.tool_use_id:
            call = self._tool(data.tool_use_id, "?")
            call.resolution = text
            if data.decision == "allow":
                call.status = "running"
            changed.append(call.key)
        level = "ok" if data.decision == "allow" else "warn"
        changed.append(self._note(f"confirmation {data.request_id}: {text}", level))
        return changed
