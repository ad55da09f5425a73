"""How the TUI folds a session's events into its transcript (no widgets involved)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clients.sdk import AnyEvent, parse_event
from clients.tui.app import parse_tool_command
from clients.tui.transcript import (
    MessageEntry,
    NoteEntry,
    ToolCallEntry,
    Transcript,
    is_expired,
    time_left,
)


class Feed:
    """Builds consecutive envelopes for one session."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(
        self, type_: str, data: dict[str, object], turn: str | None = "turn_1"
    ) -> AnyEvent:
        self.n += 1
        return parse_event(
            {
                "seq": self.n,
                "session_seq": self.n,
                "id": f"evt_{self.n}",
                "type": type_,
                "session_id": "s",
                "turn_id": turn,
                "ts": "2025-01-01T00:00:00Z",
                "data": data,
            }
        )


def requested(request_id: str, tool_use_id: str) -> dict[str, object]:
    return {
        "request_id": request_id,
        "tool_use_id": tool_use_id,
        "tool_name": "write_file",
        "side_effects": "write",
        "input_summary": "a.txt",
        "projected_modifications": ["a.txt"],
        "preview": {"kind": "diff", "text": "+hi"},
        "expires_at": "2999-01-01T00:00:00Z",
    }


def resolved(request_id: str, tool_use_id: str, decision: str, by: str) -> dict[str, object]:
    return {
        "request_id": request_id,
        "tool_use_id": tool_use_id,
        "decision": decision,
        "scope": "once",
        "resolved_by": by,
        "message": None,
    }


def test_confirmed_write_goes_through_every_status() -> None:
    feed, t = Feed(), Transcript()
    t.apply(feed("turn.started", {"source": "tool_uses"}))
    assert t.turn_status == "running"
    t.apply(feed("tool.confirmation_requested", requested("c1", "tu1")))
    call = t.entry("tool:tu1")
    assert isinstance(call, ToolCallEntry) and call.status == "awaiting_confirmation"
    assert list(t.pending) == ["c1"]
    t.apply(feed("tool.confirmation_resolved", resolved("c1", "tu1", "allow", "dash-a")))
    assert t.pending == {} and call.resolution == "allow by dash-a"
    t.apply(
        feed(
            "tool.called",
            {
                "tool_use_id": "tu1",
                "tool_name": "write_file",
                "side_effects": "write",
                "input": {"path": "a.txt", "content": "hi"},
            },
        )
    )
    assert call.status == "running" and call.summary == "a.txt"
    t.apply(
        feed(
            "tool.completed",
            {
                "tool_use_id": "tu1",
                "tool_name": "write_file",
                "duration_ms": 2.5,
                "content": [{"type": "text", "text": "wrote 2 bytes"}],
                "metadata": {},
            },
        )
    )
    assert call.status == "completed" and call.duration_ms == 2.5 and call.result == "wrote 2 bytes"
    t.apply(feed("turn.completed", {"usage": None}))
    assert t.turn_status == "completed"
    assert "turn turn_1 completed" in [getattr(e, "text", "") for e in t.entries]


def test_output_deltas_accumulate_and_failure_shows_class() -> None:
    feed, t = Feed(), Transcript()
    t.apply(feed("tool.output_delta", {"tool_use_id": "tu2", "stream": "stdout", "text": "a\n"}))
    t.apply(feed("tool.output_delta", {"tool_use_id": "tu2", "stream": "stdout", "text": "b\n"}))
    t.apply(
        feed(
            "tool.failed",
            {
                "tool_use_id": "tu2",
                "tool_name": "shell",
                "error_class": "timeout",
                "message": "took too long",
                "duration_ms": 10.0,
            },
        )
    )
    call = t.entry("tool:tu2")
    assert isinstance(call, ToolCallEntry)
    assert call.output == "a\nb\n" and call.error == "timeout: took too long"


def test_turn_end_drops_its_pending_requests() -> None:
    feed, t = Feed(), Transcript()
    t.apply(feed("turn.started", {}))
    t.apply(feed("tool.confirmation_requested", requested("c1", "tu1")))
    t.apply(feed("turn.failed", {"reason": "server_restart"}))
    assert t.pending == {}
    call = t.entry("tool:tu1")
    assert isinstance(call, ToolCallEntry) and call.status == "failed"


def test_expired_requests_are_not_pending() -> None:
    feed, t = Feed(), Transcript()
    data = {**requested("c1", "tu1"), "expires_at": "2000-01-01T00:00:00Z"}
    t.apply(feed("tool.confirmation_requested", data))
    assert t.pending == {}
    assert is_expired("2000-01-01T00:00:00Z")
    assert not is_expired("2999-01-01T00:00:00+00:00", datetime.now(UTC))


def test_deltas_then_completed_message_settle_one_entry() -> None:
    feed, t = Feed(), Transcript()
    t.apply(feed("message.delta", {"text": "Hel"}))
    t.apply(feed("message.delta", {"text": "lo"}))
    t.apply(
        feed(
            "message.completed",
            {"message": {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}},
        )
    )
    messages = [e for e in t.entries if isinstance(e, MessageEntry)]
    assert [(m.text, m.streaming) for m in messages] == [("Hello", False)]
    t.apply(
        feed(
            "message.completed",
            {"message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}},
        )
    )
    assert [m.role for m in t.entries if isinstance(m, MessageEntry)] == ["assistant", "user"]


def test_parse_tool_command() -> None:
    assert parse_tool_command('/tool write_file {"path": "a"}') == ("write_file", {"path": "a"})
    assert parse_tool_command("/tool list_dir") == ("list_dir", {})
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_tool_command("/tool x {bad")
    with pytest.raises(ValueError, match="JSON object"):
        parse_tool_command("/tool x [1]")


def test_each_streamed_assistant_message_gets_its_own_entry() -> None:
    feed, t = Feed(), Transcript()
    assistant = {"role": "assistant", "content": [{"type": "text", "text": "Running."}]}
    with_tool = {
        **assistant,
        "content": [
            {"type": "text", "text": "Running."},
            {"type": "tool_use", "id": "tu9", "name": "write_file", "input": {"path": "n"}},
        ],
    }
    t.apply(feed("message.delta", {"text": "Runn"}))
    t.apply(feed("message.delta", {"text": "ing."}))
    t.apply(feed("message.completed", {"message": with_tool}))
    t.apply(feed("message.delta", {"text": "Done"}))
    t.apply(
        feed(
            "message.completed",
            {"message": {**assistant, "content": [{"type": "text", "text": "Done."}]}},
        )
    )
    shown = [(e.text, e.streaming) if isinstance(e, MessageEntry) else e.key for e in t.entries]
    assert shown == [("Running.", False), "tool:tu9", ("Done.", False)]


def test_a_failed_turn_shows_its_reason_and_message() -> None:
    feed, t = Feed(), Transcript()
    t.apply(feed("turn.started", {}))
    message = "model call 1 failed: anthropic: auth (HTTP 401): invalid x-api-key"
    changed = t.apply(feed("turn.failed", {"reason": "model_error", "message": message}))
    note = t.entry(changed[-1])
    assert isinstance(note, NoteEntry) and note.level == "error"
    assert note.text == f"turn turn_1 failed: model_error: {message}"


def test_time_left_reads_as_a_countdown() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert time_left("2025-01-01T00:04:05Z", now) == "4 min 05 s left"
    assert time_left("2025-01-01T00:00:12Z", now) == "12 s left"
    assert time_left("2024-12-31T23:59:59Z", now) == "expired"
    assert time_left("soon", now) == "expires soon"
