"""The canonical format round-trips exactly through JSON and refuses junk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from protocol.canonical import (
    ImageBlock,
    Message,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_objects = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        json_scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
blocks = st.one_of(
    st.builds(TextBlock, text=st.text()),
    st.builds(
        ImageBlock,
        media_type=st.sampled_from(["image/png", "image/jpeg"]),
        data=st.text(alphabet="QUJD=", max_size=12),
    ),
    st.builds(
        ToolUseBlock,
        id=st.text(min_size=1, max_size=10),
        name=st.text(min_size=1, max_size=10),
        input=json_objects,
    ),
    st.builds(
        ToolResultBlock,
        tool_use_id=st.text(max_size=10),
        content=st.lists(st.builds(TextBlock, text=st.text(max_size=10)), max_size=3),
        is_error=st.booleans(),
    ),
)


@given(st.sampled_from(["user", "assistant", "tool", "system"]), st.lists(blocks, max_size=5))
def test_message_round_trip_is_exact(role: str, content: list[object]) -> None:
    message = Message(role=role, content=content)  # type: ignore[arg-type]
    text = message.model_dump_json()
    assert Message.model_validate_json(text) == message
    assert Message.model_validate_json(text).model_dump_json() == text


def test_wire_shapes_match_the_contract() -> None:
    block = ToolResultBlock(tool_use_id="tu", content=[TextBlock(text="x")], is_error=True)
    assert block.model_dump() == {
        "type": "tool_result",
        "tool_use_id": "tu",
        "content": [{"type": "text", "text": "x"}],
        "is_error": True,
    }
    definition = ToolDefinition(
        name="read_file",
        description="d",
        input_schema={"type": "object"},
        side_effects=SideEffects.READ,
    )
    assert definition.model_dump(mode="json")["side_effects"] == "read"


@pytest.mark.parametrize(
    "payload",
    [
        '{"role": "robot", "content": []}',
        '{"role": "user", "content": [{"type": "video"}]}',
        '{"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]}',
        '{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": []}]}',
        '{"role": "user"',
    ],
)
def test_junk_is_refused(payload: str) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate_json(payload)


def test_tool_names_are_provider_safe() -> None:
    with pytest.raises(ValidationError):
        ToolDefinition(
            name="has space", description="", input_schema={}, side_effects=SideEffects.NONE
        )
