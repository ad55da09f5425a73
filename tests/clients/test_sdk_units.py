"""Unit tests of the SDK's pure parts: event parsing, backoff, error-body reading.

Everything that talks to a server is tested against the real one (test_sdk_live.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from clients.sdk import (
    Backoff,
    ConfirmationRequested,
    ConfirmationResolved,
    GenericEvent,
    ProtocolViolation,
    StreamGap,
    ToolCompleted,
    Turn,
    TurnEndedFailed,
    parse_event,
)
from clients.sdk.client import _error_fields, _find_resolution
from clients.sdk.events import EVENT_CLASSES
from protocol.catalog import EventType
from protocol.payloads import PAYLOAD_MODELS
from tests.eventbus.samples import SAMPLES


def envelope(type_: str, data: Mapping[str, object], **over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "seq": 7,
        "session_seq": 3,
        "id": "evt_1",
        "type": type_,
        "session_id": "sess_1",
        "turn_id": "turn_1",
        "ts": "2025-01-01T00:00:00Z",
        "data": data,
    }
    base.update(over)
    return base


REQUESTED: dict[str, object] = {
    "request_id": "conf_1",
    "tool_use_id": "tu1",
    "tool_name": "write_file",
    "side_effects": "write",
    "rating": None,
    "input_summary": "write a.txt (2 bytes)",
    "projected_modifications": ["a.txt"],
    "preview": {"kind": "diff", "text": "+hi"},
    "expires_at": "2025-01-01T00:05:00Z",
    "scope_text": "allow write_file for this session",
}


def test_known_type_gets_typed_data() -> None:
    event = parse_event(json.dumps(envelope("tool.confirmation_requested", REQUESTED)))
    assert isinstance(event, ConfirmationRequested)
    assert event.data.request_id == "conf_1"
    assert event.data.preview.kind == "diff"
    assert event.data.scope_text == "allow write_file for this session"
    assert event.session_seq == 3


def test_extra_payload_keys_are_kept() -> None:
    data = {**REQUESTED, "future_field": 1}
    event = parse_event(envelope("tool.confirmation_requested", data))
    assert event.data.model_extra == {"future_field": 1}


@pytest.mark.parametrize("event_type", list(EventType), ids=str)
def test_every_catalog_type_parses_with_the_shared_payload_model(event_type: EventType) -> None:
    # The SDK declares no payloads of its own: data is the server's model.
    data = {**SAMPLES[event_type], "added_later": {"x": 1}}
    event = parse_event(json.dumps(envelope(str(event_type), data)))
    assert type(event) is EVENT_CLASSES[event_type] and not isinstance(event, GenericEvent)
    assert type(event.data) is PAYLOAD_MODELS[event_type]
    assert event.data.model_dump(mode="json", exclude_unset=True) == data


def test_unknown_type_is_generic_with_raw_data() -> None:
    event = parse_event(envelope("plugin.something", {"x": 1}))
    assert isinstance(event, GenericEvent)
    assert event.data == {"x": 1}


def test_known_type_with_an_unexpected_payload_stays_readable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A newer server may change a payload; the stream must not end over it."""
    data = {k: v for k, v in REQUESTED.items() if k != "request_id"}
    with caplog.at_level("WARNING", logger="toolrelay.sdk"):
        event = parse_event(envelope("tool.confirmation_requested", data))
    assert isinstance(event, GenericEvent)
    assert event.type == "tool.confirmation_requested" and event.data == data
    assert "data.request_id" in caplog.text


def test_a_bad_envelope_of_a_known_type_is_a_protocol_error() -> None:
    raw = envelope("tool.confirmation_requested", REQUESTED)
    raw.pop("session_seq")
    with pytest.raises(ProtocolViolation, match=r"tool.confirmation_requested.*session_seq"):
        parse_event(raw)


def test_bad_json_and_non_objects_are_protocol_errors() -> None:
    with pytest.raises(ProtocolViolation, match="not valid JSON"):
        parse_event("{nope")
    with pytest.raises(ProtocolViolation, match="JSON object"):
        parse_event("[1, 2]")
    with pytest.raises(ProtocolViolation, match="'type'"):
        parse_event(json.dumps({"seq": 1}))


def test_resolved_and_completed_parse() -> None:
    resolved = parse_event(
        envelope(
            "tool.confirmation_resolved",
            {
                "request_id": "conf_1",
                "tool_use_id": "tu1",
                "decision": "allow",
                "scope": "once",
                "resolved_by": "dash-a",
                "message": None,
            },
        )
    )
    assert isinstance(resolved, ConfirmationResolved)
    assert resolved.data.resolved_by == "dash-a"
    completed = parse_event(
        envelope(
            "tool.completed",
            {
                "tool_use_id": "tu1",
                "tool_name": "write_file",
                "duration_ms": 1.5,
                "content": [{"type": "text", "text": "wrote"}],
                "files_modified": ["a.txt"],
                "command_executed": None,
                "metadata": {},
            },
        )
    )
    assert isinstance(completed, ToolCompleted)
    assert completed.data.files_modified == ["a.txt"]


def test_backoff_is_bounded_and_capped() -> None:
    policy = Backoff(attempts=6, initial=0.1, factor=2, max_delay=0.5, jitter=0)
    assert list(policy.delays()) == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    assert policy.total_budget == pytest.approx(2.2)
    jittered = list(Backoff(attempts=50, initial=1, factor=1, max_delay=1, jitter=0.2).delays())
    assert len(jittered) == 50
    assert all(0.8 <= d <= 1.2 for d in jittered)


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": -1}, {"factor": 0.5}, {"jitter": 2.0}, {"initial": -1.0}],
)
def test_backoff_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="Backoff"):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_error_fields_read_the_server_shape_and_fastapi_detail() -> None:
    body = {"error": {"code": "not_found", "message": "no session 'x'"}}
    assert _error_fields(body) == ("not_found", "no session 'x'")
    assert _error_fields({"detail": "Not Found"}) == (None, "Not Found")
    assert _error_fields("plain text") == (None, None)


def test_find_resolution_wherever_the_server_nests_it() -> None:
    winner = {"request_id": "conf_1", "decision": "allow", "scope": "once", "resolved_by": "a"}
    nested = {"error": {"code": "already_resolved", "message": "m", "resolution": winner}}
    found = _find_resolution(nested)
    assert found is not None and found.resolved_by == "a"
    assert _find_resolution({"error": {"code": "conflict", "message": "m"}}) is None


def test_stream_gap_message_says_skip_or_repeat() -> None:
    skipped = StreamGap(expected=5, received=7, field="session_seq", session_id="s1")
    assert "skipped" in str(skipped) and "expected session_seq 5, got 7" in str(skipped)
    repeated = StreamGap(expected=5, received=4, field="seq", session_id=None)
    assert "repeated" in str(repeated)


def _ev(seq: int, session_seq: int, session_id: str = "sess_1") -> dict[str, object]:
    return envelope("turn.started", {}, seq=seq, session_seq=session_seq, session_id=session_id)


def test_session_stream_checks_contiguity() -> None:
    from clients.sdk.stream import EventStream

    stream = EventStream("http://127.0.0.1:1", "t" * 16, session_id="sess_1", after=2)
    assert stream._accept(parse_event(_ev(10, 3)))
    assert stream.cursor == 3
    with pytest.raises(StreamGap, match=r"skipped.*expected session_seq 4, got 5"):
        stream._accept(parse_event(_ev(12, 5)))


def test_session_stream_rejects_a_repeat() -> None:
    from clients.sdk.stream import EventStream

    stream = EventStream("http://127.0.0.1:1", "t" * 16, session_id="sess_1", after=3)
    with pytest.raises(StreamGap, match="repeated"):
        stream._accept(parse_event(_ev(10, 3)))


def test_all_sessions_stream_checks_seq_and_each_session() -> None:
    from clients.sdk.stream import EventStream

    stream = EventStream("http://127.0.0.1:1", "t" * 16)
    # First sight of each session sets its baseline; seq only has to increase.
    assert stream._accept(parse_event(_ev(5, 9, "a")))
    assert stream._accept(parse_event(_ev(8, 1, "b")))
    assert stream._accept(parse_event(_ev(9, 10, "a")))
    assert stream.cursor == 9
    with pytest.raises(StreamGap, match="in session b: expected session_seq 2, got 3"):
        stream._accept(parse_event(_ev(11, 3, "b")))
    fresh = EventStream("http://127.0.0.1:1", "t" * 16, after=9)
    with pytest.raises(StreamGap, match=r"repeated.*seq 10, got 9"):
        fresh._accept(parse_event(_ev(9, 1, "c")))


def test_stream_url_carries_cursor_and_name_not_token() -> None:
    from clients.sdk.stream import EventStream

    stream = EventStream(
        "https://example.test/", "secret-token-value", session_id="s1", after=4, client_name="me"
    )
    assert stream.url == "wss://example.test/sessions/s1/events?after=4&client=me"
    assert EventStream("http://h:1", "x" * 16).url == "ws://h:1/events"
    with pytest.raises(ValueError, match="after must be >= 0"):
        EventStream("http://h:1", "x" * 16, after=-1)


def test_a_failed_turn_raises_with_its_reason_and_message() -> None:
    message = "model call 1 failed: cannot reach the provider: connection refused"
    turn = Turn(id="turn_1", status="failed", reason="model_error", message=message)
    with pytest.raises(TurnEndedFailed) as caught:
        turn.raise_for_status()
    assert caught.value.reason == "model_error" and caught.value.failure == message
    assert str(caught.value) == f"turn turn_1 failed: model_error: {message}"
    assert caught.value.turn is turn
    done = Turn(id="turn_2", status="completed")
    assert done.raise_for_status() is done
