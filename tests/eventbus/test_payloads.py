"""The payload models: one per catalog type, required fields required, extras kept."""

from __future__ import annotations

import typing

import pytest

from dispatcher.errors import ToolErrorClass
from dispatcher.tool import CallRating
from eventbus import (
    PayloadInvalid,
    UnknownEventType,
    payload_model,
    validate_payload,
)
from protocol.canonical import Message, SideEffects, TextBlock, ToolUseBlock
from protocol.catalog import EventType
from protocol.payloads import (
    PAYLOAD_MODELS,
    CallRatingName,
    ErrorClassName,
    SideEffectsName,
    ToolFailed,
)

from .samples import SAMPLES


def test_every_catalog_type_has_a_model_and_a_sample() -> None:
    assert set(PAYLOAD_MODELS) == set(EventType)
    assert set(SAMPLES) == set(EventType)


@pytest.mark.parametrize("event_type", list(EventType), ids=str)
def test_sample_validates(event_type: EventType) -> None:
    payload = validate_payload(event_type, SAMPLES[event_type])
    assert isinstance(payload, PAYLOAD_MODELS[event_type])
    # The typed model round-trips to the same JSON-shaped data.
    assert payload.model_dump(mode="json", exclude_unset=True) == SAMPLES[event_type]


@pytest.mark.parametrize("event_type", list(EventType), ids=str)
def test_each_required_field_is_required(event_type: EventType) -> None:
    model = PAYLOAD_MODELS[event_type]
    required = [name for name, field in model.model_fields.items() if field.is_required()]
    for name in required:
        data = {k: v for k, v in SAMPLES[event_type].items() if k != name}
        with pytest.raises(PayloadInvalid) as caught:
            validate_payload(event_type, data)
        assert name in str(caught.value), caught.value
        assert str(event_type) in str(caught.value)


def test_required_fields_match_the_contract() -> None:
    def required(event_type: EventType) -> set[str]:
        fields = PAYLOAD_MODELS[event_type].model_fields
        return {name for name, field in fields.items() if field.is_required()}

    assert required(EventType.TOOL_CALLED) == {
        "tool_use_id",
        "tool_name",
        "side_effects",
        "input",
        "rating",
    }
    assert required(EventType.TOOL_CONFIRMATION_REQUESTED) == {
        "request_id",
        "tool_use_id",
        "tool_name",
        "side_effects",
        "rating",
        "input_summary",
        "projected_modifications",
        "preview",
        "expires_at",
    }
    assert required(EventType.TOOL_CONFIRMATION_RESOLVED) == {
        "request_id",
        "tool_use_id",
        "decision",
        "scope",
        "resolved_by",
        "message",
    }
    assert required(EventType.TOOL_FAILED) == {
        "tool_use_id",
        "tool_name",
        "error_class",
        "message",
        "duration_ms",
        "partial_output",
    }
    assert required(EventType.CLIENT_ATTACHED) == {"client_id", "client_name"}
    assert required(EventType.MESSAGE_DELTA) == {"text"}


def test_extra_fields_are_kept() -> None:
    data = {**SAMPLES[EventType.TOOL_FAILED], "metadata": {"exit_code": 2}}
    payload = validate_payload("tool.failed", data)
    assert isinstance(payload, ToolFailed)
    assert payload.model_dump()["metadata"] == {"exit_code": 2}


@pytest.mark.parametrize(
    ("event_type", "change", "expected"),
    [
        ("tool.failed", {"error_class": "exploded"}, "error_class"),
        ("tool.called", {"side_effects": "delete"}, "side_effects"),
        ("tool.called", {"rating": "risky"}, "rating"),
        ("tool.confirmation_resolved", {"decision": "maybe"}, "decision"),
        ("tool.confirmation_resolved", {"scope": "forever"}, "scope"),
        ("tool.confirmation_requested", {"expires_at": "next tuesday"}, "expires_at"),
        ("tool.confirmation_requested", {"expires_at": "2026-05-08T10:05:00"}, "expires_at"),
        ("tool.confirmation_requested", {"preview": {"kind": "video", "text": ""}}, "preview.kind"),
        ("tool.completed", {"duration_ms": -1}, "duration_ms"),
        ("tool.completed", {"content": [{"type": "tool_use"}]}, "content.0.type"),
        ("tool.input_invalid", {"errors": []}, "errors"),
        ("tool.output_delta", {"stream": ""}, "stream"),
        ("message.completed", {"message": {"role": "robot", "content": []}}, "message.role"),
        ("turn.completed", {"usage": {"input_tokens": -3}}, "usage.input_tokens"),
    ],
)
def test_bad_values_are_named(event_type: str, change: dict[str, object], expected: str) -> None:
    base = SAMPLES[EventType(event_type)]
    with pytest.raises(PayloadInvalid) as caught:
        validate_payload(event_type, {**base, **change})
    assert any(err.startswith(expected + ":") for err in caught.value.errors), caught.value.errors


def test_null_where_nullable_and_not_elsewhere() -> None:
    validate_payload("turn.completed", {"usage": None})
    validate_payload("tool.failed", {**SAMPLES[EventType.TOOL_FAILED], "partial_output": None})
    with pytest.raises(PayloadInvalid):
        validate_payload("tool.failed", {**SAMPLES[EventType.TOOL_FAILED], "message": None})


def test_unknown_type_and_non_mapping_data() -> None:
    with pytest.raises(UnknownEventType) as caught:
        validate_payload("tool.exploded", {})
    assert "tool.exploded" in str(caught.value)
    with pytest.raises(UnknownEventType):
        payload_model("session")
    with pytest.raises(PayloadInvalid) as invalid:
        validate_payload("turn.failed", ["reason"])  # type: ignore[arg-type]
    assert "object" in str(invalid.value)


def test_value_sets_match_the_dispatcher_and_canonical_enums() -> None:
    # eventbus may not import dispatcher/adapters, so it restates these sets.
    assert set(typing.get_args(ErrorClassName)) == {e.value for e in ToolErrorClass}
    assert set(typing.get_args(SideEffectsName)) == {e.value for e in SideEffects}
    assert set(typing.get_args(CallRatingName)) == {e.value for e in CallRating}


def test_enum_members_are_accepted_as_values() -> None:
    data = {
        **SAMPLES[EventType.TOOL_FAILED],
        "error_class": ToolErrorClass.CONFIRMATION_TIMEOUT,
    }
    assert validate_payload("tool.failed", data).model_dump()["error_class"] == (
        "confirmation_timeout"
    )


def test_a_canonical_message_dump_is_a_valid_message_completed() -> None:
    message = Message(
        role="assistant",
        content=[
            TextBlock(text="Looking."),
            ToolUseBlock(id="tu_9", name="list_dir", input={"path": "."}),
        ],
    )
    payload = validate_payload("message.completed", {"message": message.model_dump(mode="json")})
    # Nothing of the canonical message is lost on the way through the payload model.
    dumped = payload.model_dump(mode="json")["message"]
    assert Message.model_validate(dumped) == message
