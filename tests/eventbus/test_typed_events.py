"""Typed events end to end: ``EventBus.emit``, the UTF-8 encoder, the log frame."""

from __future__ import annotations

import inspect
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.publisher import EventPublisher, NullPublisher
from eventbus import EventBus, EventLog, EventNotSerializable, PayloadInvalid, UnknownEventType
from eventbus.encoding import EnvelopeEncoder
from protocol.catalog import EventType
from protocol.envelope import Event
from protocol.payloads import (
    PAYLOAD_MODELS,
    MessageDelta,
    Payload,
    ToolCompleted,
    ToolFailed,
    ToolOutputDelta,
    TurnCompleted,
    TurnFailed,
    Usage,
)

from .conftest import running_bus, take
from .samples import SAMPLES

_SURROGATE = re.compile("[\ud800-\udfff]")


def test_every_payload_class_names_its_catalog_type() -> None:
    for event_type, model in PAYLOAD_MODELS.items():
        assert model.event_type == event_type
    assert set(PAYLOAD_MODELS) == set(EventType)


def test_emit_matches_the_dispatcher_publisher_protocol() -> None:
    ours = inspect.signature(EventBus.emit)
    for theirs in (
        inspect.signature(EventPublisher.emit),
        inspect.signature(NullPublisher.emit),
    ):
        assert list(ours.parameters) == list(theirs.parameters)
        for name, param in theirs.parameters.items():
            assert ours.parameters[name].kind == param.kind
            assert ours.parameters[name].default == param.default


@pytest.mark.parametrize("event_type", list(EventType), ids=str)
async def test_emit_and_publish_write_the_same_data(event_type: EventType) -> None:
    payload = PAYLOAD_MODELS[event_type].model_validate(SAMPLES[event_type])
    async with running_bus(None) as bus:
        sub = await bus.subscribe(session_id="s")
        bus.emit(payload, session_id="s", turn_id="t")
        bus.publish(event_type, payload.model_dump(mode="json"), session_id="s", turn_id="t")
        emitted, published = await take(sub, 2)
    assert emitted.type == published.type == event_type
    assert emitted.event.data == published.event.data
    assert PAYLOAD_MODELS[event_type].model_validate(emitted.event.data) == payload


async def test_emit_through_the_log_process_is_durable_with_its_columns(log_path: Path) -> None:
    log = EventLog.open(log_path)
    content: Any = [{"type": "text", "text": "é" * 1000 + "日本"}]
    completed = ToolCompleted(
        tool_use_id="tu_1",
        tool_name="shell",
        duration_ms=3.5,
        content=content,
        files_modified=None,
        command_executed="ls",
        metadata={"exit_code": 0},
        future_key=[1, 2],  # type: ignore[call-arg]  # extra keys travel too
    )
    try:
        async with running_bus(log, log_access="process") as bus:
            sub = await bus.subscribe(session_id="ses_ü")
            bus.emit(completed, session_id="ses_ü", turn_id="trn_1")
            bus.emit(TurnCompleted(usage=Usage(input_tokens=3)), session_id="ses_ü")
            live = await take(sub, 2)
            replayed = await bus._read_page("ses_ü", 0, 10)
    finally:
        log.close()
    assert [r.text for r in replayed] == [r.text for r in live]
    assert [(r.seq, r.session_seq, r.type, r.turn_id) for r in replayed] == [
        (1, 1, "tool.completed", "trn_1"),
        (2, 2, "turn.completed", None),
    ]
    data = live[0].event.data
    assert data["content"] == content and data["future_key"] == [1, 2]
    assert live[1].event.data["usage"] == {"input_tokens": 3, "output_tokens": 0}
    # The index columns were written from the frame, as the envelope says.
    with sqlite3.connect(log_path) as conn:
        rows = conn.execute("SELECT session_id, type, turn_id, ts, json FROM events").fetchall()
    for (session_id, type_, turn_id, ts, text), record in zip(rows, live, strict=True):
        envelope = json.loads(text)
        assert (session_id, type_, turn_id, ts) == (
            envelope["session_id"],
            envelope["type"],
            envelope["turn_id"],
            envelope["ts"],
        )
        assert text.encode() == record.encoded
    assert len(live[0].encoded) == live[0].size > len(live[0].text)  # bytes, not characters


async def test_emit_refuses_what_publish_refuses() -> None:
    async with running_bus(None, validate_payloads=True) as bus:
        with pytest.raises(UnknownEventType, match="Payload"):
            bus.emit(Payload(), session_id="s")
        with pytest.raises(EventNotSerializable, match="Unicode"):
            bus.emit(MessageDelta(text="x"), session_id="ses_\udcff")
        with pytest.raises(EventNotSerializable, match=r"tool\.failed"):
            bus.emit(
                ToolFailed.model_construct(
                    tool_use_id="tu",
                    tool_name="x",
                    error_class="timeout",
                    message=object(),
                    duration_ms=1.0,
                    partial_output=None,
                ),
                session_id="s",
            )
        with pytest.raises(PayloadInvalid, match="stream"):
            # Built without validation: debug mode checks it at the bus.
            bus.emit(
                ToolOutputDelta.model_construct(tool_use_id="tu", stream="", text=""),
                session_id="s",
            )
        assert bus.last_seq == 0


# Any string, lone surrogates included (hypothesis leaves them out by default).
any_text = st.text(st.characters(codec=None, exclude_categories=[]), max_size=40) | st.text(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=4
)


@settings(max_examples=150, deadline=None)
@given(
    text=any_text,
    other=any_text,
    key=any_text,
    payload_kind=st.sampled_from(["delta", "output", "failed", "completed", "turn"]),
)
def test_any_payload_encodes_to_utf8_json_that_decodes_back(
    text: str, other: str, key: str, payload_kind: str
) -> None:
    payload: Payload
    if payload_kind == "delta":
        payload = MessageDelta(text=text, index=0)
    elif payload_kind == "output":
        # Constrained fields (min_length) refuse lone surrogates at construction.
        payload = ToolOutputDelta(
            tool_use_id="tu" + key.encode(errors="replace").decode(), stream="stdout", text=text
        )
    elif payload_kind == "failed":
        payload = ToolFailed(
            tool_use_id="tu",
            tool_name="shell",
            error_class="execution_error",
            message=text,
            duration_ms=0.0,
            partial_output=other,
        )
    elif payload_kind == "turn":
        # Extra keys must be valid text themselves (pydantic refuses others).
        payload = TurnFailed(reason=text, message=other, extra_text=text)  # type: ignore[call-arg]
    else:
        payload = ToolCompleted(
            tool_use_id="tu",
            tool_name="shell",
            duration_ms=1.0,
            content=[{"type": "text", "text": text}],
            files_modified=[other],
            command_executed=None,
            metadata={key: [text, other]},
        )
    encoded = EnvelopeEncoder().encode(
        seq=1,
        session_seq=1,
        event_id="evt_1",
        type=payload.event_type,
        session_id="ses_1",
        turn_id=None,
        ts="2026-05-08T10:00:00.000000Z",
        data=payload,
    )
    decoded_text = encoded.decode("utf-8")  # strict: no lone surrogate got through
    event = Event.model_validate_json(encoded)
    assert json.loads(decoded_text)["data"] == event.data
    expected = _sanitised(payload.model_dump(mode="python"))
    assert event.data == expected
    assert type(payload).model_validate(event.data).model_dump() == expected


def _sanitised(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_sanitised(k): _sanitised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sanitised(v) for v in value]
    return value


def test_numeric_keys_become_strings_and_bytes_are_refused() -> None:
    encoder = EnvelopeEncoder()

    def encode(data: Any) -> bytes:
        return encoder.encode(
            seq=1,
            session_seq=1,
            event_id="e",
            type="turn.failed",
            session_id="s",
            turn_id=None,
            ts="t",
            data=data,
        )

    assert json.loads(encode({1: "a", "b": {2: 3}}))["data"] == {"1": "a", "b": {"2": 3}}
    with pytest.raises(TypeError):
        encode({"reason": b"bytes"})
    with pytest.raises(TypeError):
        encode({(1, 2): "tuple key"})
