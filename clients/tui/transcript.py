"""What the TUI knows about a session, rebuilt from its event stream.

This module holds no widgets: :class:`Transcript` folds typed events into
entries (messages, tool calls, notes) and the set of pending confirmations,
and tells the caller which entry changed, so the app only redraws that one.
Keeping it free of Textual makes the folding rules easy to read and test.

Events of the execution pipeline (hooks, guardrails, dry-run plans, quality
gates) are read by their type name and their data's keys, whether the SDK
gives them a typed model or a plain dict, so a server ahead of this SDK is
still shown. A sub-agent's events (``data.subagent_session_id``) fold into a
nested :class:`Transcript` held by the parent's ``dispatch_subagent`` call
that ``data.parent_tool_use_id`` names.
Any other event type becomes a generic one-line note: nothing is dropped
silently and nothing unknown can break the fold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

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
from protocol.catalog import EventType

# Streamed output kept per tool call; older text is dropped (the server keeps it all).
MAX_OUTPUT_CHARS = 20_000
# Lines of a quality gate's output kept under its note.
GATE_OUTPUT_LINES = 20
# Presence and creation say nothing about the work; the status line covers them.
QUIET_TYPES = frozenset(
    {EventType.CLIENT_ATTACHED, EventType.CLIENT_DETACHED, EventType.SESSION_CREATED}
)
SUBAGENT_TOOL = "dispatch_subagent"


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
    status: str = "requested"  # also "planned" (dry-run) and "blocked" (guardrail/hook)
    duration_ms: float | None = None
    output: str = ""
    result: str = ""
    error: str = ""
    resolution: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    # Lines about the call from the pipeline: hook runs, guardrail warnings.
    notes: list[tuple[str, str]] = field(default_factory=list)  # (text, level)
    subagent: SubagentRun | None = None  # set on a dispatch_subagent call


@dataclass(slots=True)
class NoteEntry:
    """A one-line note: a turn started or ended, a confirmation resolved;
    ``detail`` holds lines shown under it (a dry-run plan, a gate's output)."""

    key: str
    text: str
    level: str = "info"  # "info" | "ok" | "warn" | "error"
    detail: list[str] = field(default_factory=list)


Entry = MessageEntry | ToolCallEntry | NoteEntry


@dataclass(slots=True)
class PendingRequest:
    """A confirmation request nobody has answered yet. ``session_id`` is set
    when a sub-agent asks: the answer goes to its (child) session."""

    turn_id: str
    data: ConfirmationRequestedData
    session_id: str | None = None
    label: str = ""


@dataclass(slots=True)
class SubagentRun:
    """A sub-agent's worker session, watched through the parent's stream."""

    session_id: str
    agent_type: str = ""
    transcript: Transcript = field(default_factory=lambda: Transcript())

    @property
    def label(self) -> str:
        return f"sub-agent {self.agent_type}" if self.agent_type else "sub-agent"


def _text_of(blocks: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def field_of(data: Any, key: str) -> Any:
    """One key of an event's data, whether the SDK typed it (extra keys are
    attributes of the model) or handed over the plain dict."""
    if isinstance(data, Mapping):
        return data.get(key)
    return getattr(data, key, None)


def data_dict(data: Any) -> dict[str, Any]:
    """An event's data as a plain dict (for generic rendering)."""
    if isinstance(data, Mapping):
        return dict(data)
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    return {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def describe_generic(event_type: str, data: Any, limit: int = 160) -> str:
    """``type: key=value ...`` from the data's short scalar fields: how an event
    this client has no rule for still shows up."""
    parts = [
        f"{key}={value}"
        for key, value in data_dict(data).items()
        if isinstance(value, str | int | float | bool) and len(str(value)) <= 60
    ]
    text = f"{event_type}: {' '.join(parts)}" if parts else event_type
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _without_name(summary: str, name: str) -> str:
    """A plan summary without the tool name it starts with (the entry shows it)."""
    for prefix in (f"{name}: ", f"{name} "):
        if name and summary.startswith(prefix):
            return summary[len(prefix) :]
    return summary


def hook_text(data: Any) -> tuple[str, str]:
    """A ``hook.completed`` as one line and its level."""
    decision = _str(field_of(data, "decision")) or "?"
    name, hook_event = _str(field_of(data, "hook")) or "?", _str(field_of(data, "event"))
    text = f"hook {name} ({hook_event}): {decision}"
    exit_code = field_of(data, "exit_code")
    if exit_code is not None:
        text += f", exit {exit_code}"
    duration = field_of(data, "duration_ms")
    if isinstance(duration, int | float):
        text += f" · {duration:.0f} ms"
    return text, {"allow": "info", "block": "error"}.get(decision, "warn")


def summarize_input(tool_input: dict[str, Any], limit: int = 80) -> str:
    """A short one-line rendering of a tool input for the transcript."""
    for key in ("command", "path", "pattern", "url", "task", "query"):
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
    # The session this transcript shows, when known: its own events are never
    # taken for a sub-agent's.
    session_id: str | None = None
    _by_key: dict[str, Entry] = field(default_factory=dict)
    _notes: int = 0
    _streaming: str | None = None  # key of the assistant message being streamed
    _subagents: dict[str, ToolCallEntry] = field(default_factory=dict)

    # -- entry helpers ---------------------------------------------------------

    def entry(self, key: str) -> Entry | None:
        return self._by_key.get(key)

    def _add(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self._by_key[entry.key] = entry
        return entry

    def _note(self, text: str, level: str = "info", detail: list[str] | None = None) -> str:
        self._notes += 1
        key = f"note:{self._notes}"
        self._add(NoteEntry(key, text, level, detail or []))
        return key

    def _tool(self, tool_use_id: str, name: str) -> ToolCallEntry:
        key = f"tool:{tool_use_id}"
        found = self._by_key.get(key)
        if isinstance(found, ToolCallEntry):
            if found.name == "?" and name != "?":
                # Pre-call events (hooks, output) can come before the call's name.
                found.name = name
            return found
        entry = ToolCallEntry(key=key, tool_use_id=tool_use_id, name=name)
        self._add(entry)
        return entry

    def tool_calls(self) -> list[ToolCallEntry]:
        return [e for e in self.entries if isinstance(e, ToolCallEntry)]

    # -- folding -----------------------------------------------------------------

    def apply(self, event: AnyEvent) -> list[str]:
        """Fold one event in; returns the keys of the entries it added or changed."""
        child = field_of(event.data, "subagent_session_id")
        if isinstance(child, str) and child and child != self.session_id:
            return self._subagent(event, child)
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
            call.input = call.input or dict(event.data.input)
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
            blocked = field_of(event.data, "blocked_by")
            if isinstance(blocked, Mapping):
                # A guardrail or hook refused the call: name it, not just the class.
                kind, name = _str(blocked.get("kind")) or "rule", _str(blocked.get("name"))
                call.status = "blocked"
                call.error = f"blocked by {kind} {name}: {event.data.message}"
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
        return self._pipeline(event)

    # -- the execution pipeline, agents and anything else ------------------------

    def _pipeline(self, event: AnyEvent) -> list[str]:
        """Events read by type name and data keys (typed by the SDK or not)."""
        data, kind = event.data, event.type
        tool_use_id = _str(field_of(data, "tool_use_id"))
        if kind == EventType.TOOL_PLANNED:
            call = self._tool(tool_use_id, _str(field_of(data, "tool_name")) or "?")
            call.status = "planned"
            call.summary = _without_name(_str(field_of(data, "summary")), call.name) or call.summary
            tool_input = field_of(data, "input")
            if isinstance(tool_input, Mapping):
                call.input = dict(tool_input)
            return [call.key]
        if kind == EventType.HOOK_COMPLETED:
            text, level = hook_text(data)
            return self._about_call(tool_use_id, text, level)
        if kind == EventType.GUARDRAIL_WARNING:
            rule, message = _str(field_of(data, "rule")), _str(field_of(data, "message"))
            return self._about_call(tool_use_id, f"guardrail {rule}: {message}", "warn")
        if kind == EventType.QUALITY_GATE_COMPLETED:
            passed = field_of(data, "passed") is True
            name, exit_code = _str(field_of(data, "name")), field_of(data, "exit_code")
            text = f"quality gate {name} {'passed' if passed else 'failed'}"
            if exit_code is not None:
                text += f" (exit {exit_code})"
            required = field_of(data, "required")
            level = "ok" if passed else ("warn" if required is False else "error")
            output = _str(field_of(data, "output")).rstrip("\n").splitlines()
            detail = output if passed is False else []
            return [self._note(text, level, detail[-GATE_OUTPUT_LINES:])]
        if kind == EventType.MODEL_RETRY:
            attempt, delay = field_of(data, "attempt"), field_of(data, "delay_s")
            reason = _str(field_of(data, "error_kind")) or _str(field_of(data, "reason"))
            text = f"model call failed ({reason or 'retryable error'}), retry {attempt}"
            if isinstance(delay, int | float):
                text += f" in {delay:g} s"
            provider, message = _str(field_of(data, "provider")), _str(field_of(data, "message"))
            if provider:
                text += f" [{provider}]"
            if message:
                text += f": {message}"
            return [self._note(text, "warn")]
        if kind == EventType.TOOLS_CHANGED:
            added = field_of(data, "added") or []
            removed = field_of(data, "removed") or []
            names = [f"+{n}" for n in added] + [f"-{n}" for n in removed]
            source = _str(field_of(data, "source"))
            text = "tools changed" + (f" ({source})" if source else "")
            return [self._note(f"{text}: {', '.join(names)}" if names else text)]
        if kind in QUIET_TYPES:
            return []
        return [self._note(describe_generic(kind, data))]

    def _about_call(self, tool_use_id: str, text: str, level: str) -> list[str]:
        """A line under the call it concerns, or a note when it concerns none."""
        if tool_use_id:
            call = self._tool(tool_use_id, "?")
            call.notes.append((text, level))
            return [call.key]
        return [self._note(text, level)]

    def _subagent(self, event: AnyEvent, child: str) -> list[str]:
        """Fold a sub-agent's event into its run, nested under the parent's call."""
        call = self._subagents.get(child)
        if call is None:
            call = self._adopt(
                child,
                _str(field_of(event.data, "agent_type")),
                _str(field_of(event.data, "parent_tool_use_id")),
            )
            self._subagents[child] = call
        run = call.subagent
        assert run is not None
        agent_type = _str(field_of(event.data, "agent_type"))
        if agent_type and not run.agent_type:
            run.agent_type = agent_type
        run.transcript.apply(event)
        # The sub-agent's confirmations are the parent's to answer too, at the child session.
        for request_id, waiting in run.transcript.pending.items():
            if request_id not in self.pending:
                self.pending[request_id] = PendingRequest(
                    waiting.turn_id, waiting.data, session_id=child, label=run.label
                )
        for request_id, waiting in list(self.pending.items()):
            if waiting.session_id == child and request_id not in run.transcript.pending:
                del self.pending[request_id]
        return [call.key]

    def _adopt(self, child: str, agent_type: str, parent_tool_use_id: str = "") -> ToolCallEntry:
        """The parent's ``dispatch_subagent`` call a new sub-agent belongs to.

        The server names it (``data.parent_tool_use_id``): that call, made here
        if the stream has not shown it yet. Without the name (an older server)
        the guess: the oldest unclaimed call still running (of the same agent
        type when the call says it). A call of its own when neither finds one.
        """
        picked: ToolCallEntry | None = None
        if parent_tool_use_id:
            named = self._tool(parent_tool_use_id, SUBAGENT_TOOL)
            # One call starts one child; a second claimant is shown on its own.
            picked = named if named.subagent is None else None
        else:
            picked = self._guess_call(agent_type)
        if picked is None:
            picked = ToolCallEntry(
                key=f"subagent:{child}", tool_use_id="", name=SUBAGENT_TOOL, status="running"
            )
            self._add(picked)
        picked.subagent = SubagentRun(child, agent_type, Transcript(session_id=child))
        return picked

    def _guess_call(self, agent_type: str) -> ToolCallEntry | None:
        """The fallback for events without ``parent_tool_use_id``."""
        waiting = [c for c in self.tool_calls() if c.name == SUBAGENT_TOOL and c.subagent is None]
        live = ("requested", "awaiting_confirmation", "running")
        running = [c for c in waiting if c.status in live] or waiting
        same = [c for c in running if agent_type and c.input.get("agent_type") == agent_type]
        candidates = same or running
        return candidates[0] if candidates else None

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
        detail: list[str] = []
        plan = field_of(event.data, "plan")
        if isinstance(plan, list):
            # A dry-run turn: what it would have done, in order.
            reason += f" (dry-run plan: {len(plan)} action{'s' if len(plan) != 1 else ''})"
            for number, raw in enumerate(plan, 1):
                step: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
                name, summary = _str(step.get("tool_name")), _str(step.get("summary"))
                # The server's summary reads whole ("shell: npm test"); the name only without one.
                detail.append(f"{number}. {summary or name}")
        changed.append(self._note(f"turn {event.turn_id} {status}{reason}", level, detail))
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
                    if isinstance(tool_input, dict) and not call.input:
                        call.input = dict(tool_input)
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
