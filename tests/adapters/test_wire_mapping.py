"""Canonical <-> wire mappings for both providers, without a network."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import anthropic_wire, openai_wire
from adapters.base import ModelRequest
from adapters.errors import RequestNotConvertible
from adapters.schema_check import check_tool_definition
from protocol.canonical import (
    ContentBlock,
    ImageBlock,
    Message,
    ResultContent,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    text_result,
)

# -- strategies: well-formed conversations -----------------------------------

_text = st.text(min_size=1, max_size=20).filter(lambda t: t.strip() != "")
_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=3, max_size=12)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_inputs = st.dictionaries(st.text(min_size=1, max_size=8), _json_values, max_size=3)
_images = st.builds(
    ImageBlock,
    media_type=st.sampled_from(["image/png", "image/jpeg"]),
    data=st.text(
        alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        min_size=4,
        max_size=16,
    ),
)


@st.composite
def conversations(draw: st.DrawFn, *, rich: bool) -> list[Message]:
    """user, (assistant with tool calls, tool results)*, assistant text.

    ``rich`` allows what only Anthropic carries exactly: images in results,
    several text blocks per message, text after tool calls.
    """
    messages: list[Message] = []
    first: list[ContentBlock] = [TextBlock(text=draw(_text))]
    if draw(st.booleans()):
        first.append(draw(_images))
    if rich and draw(st.booleans()):
        first.append(TextBlock(text=draw(_text)))
    messages.append(Message(role="user", content=first))
    used: set[str] = set()
    for _ in range(draw(st.integers(0, 2))):
        ids = draw(
            st.lists(_ids.filter(lambda i: i not in used), min_size=1, max_size=3, unique=True)
        )
        used.update(ids)
        assistant: list[ContentBlock] = []
        if draw(st.booleans()):
            assistant.append(TextBlock(text=draw(_text)))
        assistant.extend(
            ToolUseBlock(
                id=i, name=draw(st.sampled_from(["read_file", "shell"])), input=draw(_inputs)
            )
            for i in ids
        )
        messages.append(Message(role="assistant", content=assistant))
        results: list[ContentBlock] = []
        for i in ids:
            content: list[ResultContent] = [TextBlock(text=draw(_text))]
            if rich and draw(st.booleans()):
                content.append(draw(_images))
            results.append(
                ToolResultBlock(tool_use_id=i, content=content, is_error=draw(st.booleans()))
            )
        messages.append(Message(role="tool", content=results))
    messages.append(Message(role="assistant", content=[TextBlock(text=draw(_text))]))
    return messages


@settings(max_examples=150, deadline=None)
@given(conversations(rich=True))
def test_anthropic_round_trip_is_exact(messages: list[Message]) -> None:
    assert anthropic_wire.messages_from_wire(anthropic_wire.messages_to_wire(messages)) == messages


@settings(max_examples=150, deadline=None)
@given(conversations(rich=False))
def test_openai_round_trip_is_exact_for_what_it_can_carry(messages: list[Message]) -> None:
    assert openai_wire.messages_from_wire(openai_wire.messages_to_wire(messages)) == messages


# -- anthropic specifics -----------------------------------------------------


def test_anthropic_lifts_system_messages_into_the_system_prompt() -> None:
    req = ModelRequest(
        system="You are careful.",
        messages=[
            Message(role="system", content=[TextBlock(text="Workspace is /w.")]),
            Message(role="user", content=[TextBlock(text="hi")]),
        ],
    )
    body = anthropic_wire.build_request(req, "claude-x")
    assert body["system"] == "You are careful.\n\nWorkspace is /w."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["model"] == "claude-x"
    assert "tools" not in body


def test_anthropic_merges_tool_results_and_following_user_text() -> None:
    wire = anthropic_wire.messages_to_wire(
        [
            Message(role="user", content=[TextBlock(text="go")]),
            Message(role="assistant", content=[ToolUseBlock(id="t1", name="shell", input={})]),
            Message(role="tool", content=[text_result("t1", "done", is_error=True)]),
            Message(role="user", content=[TextBlock(text="and now?")]),
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "text", "text": "done"}],
            "is_error": True,
        },
        {"type": "text", "text": "and now?"},
    ]


def test_anthropic_drops_empty_text_and_empty_messages() -> None:
    wire = anthropic_wire.messages_to_wire(
        [
            Message(role="user", content=[TextBlock(text=""), TextBlock(text="hi")]),
            Message(role="assistant", content=[TextBlock(text="")]),
            Message(role="tool", content=[ToolResultBlock(tool_use_id="t", content=[])]),
        ]
    )
    # The emptied assistant message goes, so the two user-side messages merge.
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t"},
                {"type": "text", "text": "hi"},
            ],
        }
    ]


def test_anthropic_tool_result_images() -> None:
    image = ImageBlock(media_type="image/png", data="AAAA")
    wire = anthropic_wire.messages_to_wire(
        [Message(role="tool", content=[ToolResultBlock(tool_use_id="t", content=[image])])]
    )
    assert wire[0]["content"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    ]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (
            Message(role="assistant", content=[ImageBlock(media_type="image/png", data="A")]),
            "image",
        ),
        (Message(role="user", content=[ToolUseBlock(id="x", name="n", input={})]), "tool_use"),
        (Message(role="assistant", content=[text_result("x", "r")]), "tool_result"),
    ],
)
def test_anthropic_refuses_misplaced_blocks(message: Message, problem: str) -> None:
    with pytest.raises(RequestNotConvertible, match=rf"messages\[0\].*{problem}"):
        anthropic_wire.messages_to_wire([message])


# -- openai specifics --------------------------------------------------------


def test_openai_tool_results_become_tool_messages_and_images_follow() -> None:
    image = ImageBlock(media_type="image/png", data="AAAA")
    wire = openai_wire.messages_to_wire(
        [
            Message(
                role="assistant",
                content=[
                    ToolUseBlock(id="c1", name="shot", input={"w": 1}),
                    ToolUseBlock(id="c2", name="read_file", input={"path": "x"}),
                ],
            ),
            Message(
                role="tool",
                content=[
                    ToolResultBlock(tool_use_id="c1", content=[TextBlock(text="here"), image]),
                    text_result("c2", "nope", is_error=True),
                ],
            ),
        ]
    )
    assert wire == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "shot", "arguments": '{"w": 1}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "x"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "here\n[image 1 (image/png) follows in the next message]",
        },
        {"role": "tool", "tool_call_id": "c2", "content": "ERROR: nope"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images from tool result c1:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
    ]


def test_openai_system_prompt_and_system_messages_lead() -> None:
    req = ModelRequest(
        system="Base.",
        messages=[
            Message(role="user", content=[TextBlock(text="hi")]),
            Message(role="system", content=[TextBlock(text="Later note.")]),
        ],
    )
    body = openai_wire.build_request(req, "gpt-x", include_usage=False)
    assert body["messages"] == [
        {"role": "system", "content": "Base.\n\nLater note."},
        {"role": "user", "content": "hi"},
    ]
    assert "stream_options" not in body


def test_openai_lossy_mappings_are_the_documented_ones() -> None:
    several = Message(role="assistant", content=[TextBlock(text="a"), TextBlock(text="b")])
    back = openai_wire.messages_from_wire(openai_wire.messages_to_wire([several]))
    assert back == [Message(role="assistant", content=[TextBlock(text="ab")])]


def test_openai_refuses_images_in_assistant_and_system_messages() -> None:
    image = ImageBlock(media_type="image/png", data="A")
    with pytest.raises(RequestNotConvertible, match="assistant"):
        openai_wire.messages_to_wire([Message(role="assistant", content=[image])])
    with pytest.raises(RequestNotConvertible, match="only text"):
        openai_wire.messages_to_wire([Message(role="system", content=[image])])


# -- tool definitions and the subset guard -----------------------------------


def _tool(schema: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        name="probe", description="d", input_schema=schema, side_effects=SideEffects.NONE
    )


GOOD = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "format": "path"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_good_schemas_serialise_for_both_providers() -> None:
    tool = _tool(GOOD)
    assert anthropic_wire.tool_to_wire(tool)["input_schema"] == GOOD
    assert openai_wire.tool_to_wire(tool)["function"]["parameters"] == GOOD


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}, "properties.a"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "'$ref'"),
        ({"type": "object", "items": {"type": "string", "pattern": "^(a+)+$"}}, "'pattern'"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "additionalProperties"),
        ({"type": "object", "oneOf": []}, "'oneOf'"),
        ({"type": "array"}, "must have"),
        ({"type": "object", "properties": {"a": "string"}}, "must be an object"),
    ],
)
def test_schemas_outside_the_subset_never_reach_a_provider(
    schema: dict[str, Any], named: str
) -> None:
    tool = _tool(schema)
    with pytest.raises(RequestNotConvertible, match="probe") as caught:
        check_tool_definition(tool)
    assert named in str(caught.value)
    for serialise in (anthropic_wire.tool_to_wire, openai_wire.tool_to_wire):
        with pytest.raises(RequestNotConvertible):
            serialise(tool)
    req = ModelRequest(messages=[Message(role="user", content=[TextBlock(text="x")])], tools=[tool])
    with pytest.raises(RequestNotConvertible):
        anthropic_wire.build_request(req, "m")
    with pytest.raises(RequestNotConvertible):
        openai_wire.build_request(req, "m")
