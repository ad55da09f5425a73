"""Events carry tool output up to a size; the tool_result keeps all of it."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from dispatcher import DispatchSession, ToolDispatcher
from dispatcher.errors import ToolTimeout
from dispatcher.event_output import event_message
from dispatcher.tool import ToolContext, ToolOutput
from protocol.canonical import ImageBlock, SideEffects, TextBlock, ToolDefinition, ToolUseBlock
from tests.dispatcher.support import EchoTool, RecordingPublisher, schema

LIMIT = 4096


class BigOutputTool:
    """Streams one large chunk, then returns text and two images."""

    definition = ToolDefinition(
        name="big",
        description="Large output.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.emit_output("stdout", input["text"])
        small = base64.b64encode(b"\x89PNG" + b"\0" * 300).decode()
        large = base64.b64encode(b"\x89PNG" + b"\0" * 30_000).decode()
        return ToolOutput(
            content=[
                TextBlock(text=input["text"]),
                ImageBlock(media_type="image/png", data=large),
                ImageBlock(media_type="image/png", data=small),
            ]
        )

    async def cancel(self) -> bool:
        return False


@pytest.fixture
def small_events(publisher: RecordingPublisher) -> ToolDispatcher:
    return ToolDispatcher(publisher, max_event_output_bytes=LIMIT)


def _use(name: str, text: str) -> ToolUseBlock:
    return ToolUseBlock(id="tu_big", name=name, input={"text": text})


async def test_small_output_travels_whole_and_says_so(
    small_events: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    small_events.register(EchoTool)
    await small_events.dispatch(_use("echo", "héllo"), session, turn_id="t")
    data = publisher.first("tool.completed").data
    assert data["content"] == [{"type": "text", "text": "héllo"}]
    assert data["truncated"] is False and data["output_bytes"] == 6


async def test_large_output_is_cut_in_events_and_kept_whole_in_the_result(
    small_events: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    small_events.register(BigOutputTool)
    # Multi-byte characters and a lone surrogate (an undecodable file name).
    text = ("é" * 3000) + "\udcff" + ("x" * 20_000)
    result = await small_events.dispatch(_use("big", text), session, turn_id="t")
    # The tool_result (what the model and the turn record get) is untouched.
    assert not result.is_error
    assert result.content[0] == TextBlock(text=text)
    assert len(result.content) == 3

    full = len(text.encode("utf-8", "surrogatepass"))
    delta = publisher.first("tool.output_delta").data
    assert delta["truncated"] is True and delta["output_bytes"] == full
    assert text.startswith(delta["text"].split("\n[output truncated")[0])
    assert len(delta["text"].encode()) < LIMIT + 200

    data = publisher.first("tool.completed").data
    large, small = (len(b.data) for b in result.content[1:] if isinstance(b, ImageBlock))
    assert data["truncated"] is True and data["output_bytes"] == full + large + small
    blocks = data["content"]
    # The text was cut to the budget: nothing left for the large image.
    assert blocks[0]["type"] == "text" and text.startswith(blocks[0]["text"])
    assert len(blocks[0]["text"].encode("utf-8", "surrogatepass")) <= LIMIT
    assert [b["type"] for b in blocks] == ["text", "text"]
    note = blocks[-1]["text"]
    assert f"of {full + large + small} bytes" in note and "2 image(s) left out" in note
    assert "full result is in the conversation" in note


async def test_images_that_fit_are_kept(
    publisher: RecordingPublisher, session: DispatchSession
) -> None:
    dispatcher = ToolDispatcher(publisher, max_event_output_bytes=1024 * 1024)
    dispatcher.register(BigOutputTool)
    await dispatcher.dispatch(_use("big", "short"), session, turn_id="t")
    data = publisher.first("tool.completed").data
    assert data["truncated"] is False
    assert [b["type"] for b in data["content"]] == ["text", "image", "image"]


class FailingWithOutputTool:
    """Fails (as a timeout does) after producing a large output."""

    definition = ToolDefinition(
        name="fail_big",
        description="Fails with a large partial output.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise ToolTimeout("fail_big timed out", partial_output=input["text"])

    async def cancel(self) -> bool:
        return False


async def test_a_failed_calls_partial_output_is_cut_in_its_event_and_kept_in_the_result(
    small_events: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    small_events.register(FailingWithOutputTool)
    text = ("é" * 3000) + ("y" * 20_000)
    result = await small_events.dispatch(_use("fail_big", text), session, turn_id="t")
    # The tool_result keeps every byte the tool produced.
    assert result.is_error and text in result.text()
    data = publisher.first("tool.failed").data
    assert data["error_class"] == "timeout"
    full = len(text.encode())
    assert data["truncated"] is True and data["output_bytes"] == full
    shown = data["partial_output"]
    assert text.startswith(shown.split("\n[output truncated")[0])
    assert f"of {full} bytes" in shown
    assert len(shown.encode()) < LIMIT + 200


async def test_a_small_partial_output_travels_whole(
    small_events: ToolDispatcher, session: DispatchSession, publisher: RecordingPublisher
) -> None:
    small_events.register(FailingWithOutputTool)
    await small_events.dispatch(_use("fail_big", "started\n"), session, turn_id="t")
    data = publisher.first("tool.failed").data
    assert data["partial_output"] == "started\n" and "truncated" not in data


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_event_output_bytes"):
        ToolDispatcher(max_event_output_bytes=0)


def test_a_tool_message_event_shares_the_limit_among_its_results() -> None:
    big = "é" * 10_000  # 20 000 bytes
    message = {
        "role": "tool",
        "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": big}]},
            {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "k"}]},
            {"type": "tool_result", "tool_use_id": "c", "is_error": True, "content": []},
        ],
    }
    event = event_message(message, 3 * 2048)
    first, second, third = event["content"]
    # Each result gets a third of the limit; only the large one is cut.
    assert first["truncated"] is True and first["output_bytes"] == 20_000
    assert len(first["content"][0]["text"].encode()) <= 2048
    assert "of 20000 bytes" in first["content"][-1]["text"]
    assert second == message["content"][1] and third == message["content"][2]
    assert message["content"][0]["content"][0]["text"] == big  # the input is untouched
    # Messages without tool results pass as they are.
    assistant = {"role": "assistant", "content": [{"type": "text", "text": big}]}
    assert event_message(assistant, 10) == assistant
