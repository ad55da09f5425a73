"""The events a call publishes are what their payload models say, and
``tool.completed`` bounds ``structured`` as it bounds content.

- ``tool.called``, ``tool.completed`` and ``tool.output_delta`` name every
  field of the event's payload model and survive validation and a JSON dump
  unchanged;
- ``bus.publish`` writes data as the event's ``data``;
- the shortcuts of the hot path (the result block built from checked parts,
  a text-only event content) build what the general paths build;
- structured data past ``max_event_output_bytes`` is left out of the event
  (``structured: null``, ``structured_truncated``, ``structured_bytes``), and
  the model's result block is the same either way.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson

from dispatcher import (
    AutoAllowPolicy,
    DispatchSession,
    ToolContext,
    ToolDispatcher,
    ToolOutput,
    WorkspaceFileAPI,
)
from dispatcher.call_events import bounded_structured
from eventbus import EventBus
from protocol.canonical import (
    ImageBlock,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.dispatcher.support import RecordingPublisher


class ManyShapesTool:
    """Returns the output its input describes: text, images, structured
    data, files, metadata, a handled failure, big or small."""

    definition = ToolDefinition(
        name="shapes",
        description="Returns outputs of many shapes.",
        input_schema={"type": "object"},
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        content: list[TextBlock | ImageBlock] = [TextBlock(text=input.get("text", ""))]
        if input.get("image"):
            content.append(ImageBlock(media_type="image/png", data="aGk=" * input["image"]))
        if input.get("stream"):
            context.emit_output("stdout", input["stream"])
        return ToolOutput(
            content=content,
            success=input.get("success", True),
            metadata=input.get("metadata", {}),
            files_modified=input.get("files"),
            command_executed=input.get("command"),
            data=input.get("data"),
        )

    async def cancel(self) -> bool:
        return False


async def test_published_data_is_exactly_its_models_fields(workspace: WorkspaceFileAPI) -> None:
    """Property over random outputs: every event a call publishes names every
    declared field (no more, bar ``tool.output_delta``'s documented extras)
    and survives validation and a JSON dump unchanged."""
    import random

    from protocol.catalog import EventType
    from protocol.payloads import PAYLOAD_MODELS

    rng = random.Random(7)
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher, max_event_output_bytes=200)
    dispatcher.register(ManyShapesTool)
    session = DispatchSession("sess_1", workspace, policy=AutoAllowPolicy())
    for i in range(60):
        tool_input: dict[str, Any] = {"text": "é" * rng.randrange(0, 150)}
        if rng.random() < 0.3:
            tool_input["image"] = rng.randrange(1, 80)
        if rng.random() < 0.5:
            tool_input["stream"] = "o" * rng.randrange(1, 400)
        if rng.random() < 0.4:
            tool_input["data"] = {"rows": ["x"] * rng.randrange(0, 60)}
        if rng.random() < 0.3:
            tool_input["files"] = ["a.py", "b/c.py"]
            tool_input["command"] = "make"
        if rng.random() < 0.3:
            tool_input["metadata"] = {"exit_code": 0, "nested": {"k": [1, 2]}}
        block = ToolUseBlock(id=f"tu_{i}", name="shapes", input=tool_input)
        await dispatcher.dispatch(block, session, turn_id="t")
    seen = set()
    for event in publisher.events:
        if event.type not in ("tool.called", "tool.completed", "tool.output_delta"):
            continue
        seen.add(event.type)
        model = PAYLOAD_MODELS[EventType(event.type)]
        declared = set(model.model_fields)
        keys = set(event.data)
        if event.type == "tool.output_delta":
            assert declared <= keys <= declared | {"truncated", "output_bytes"}
        else:
            assert keys == declared, (event.type, keys ^ declared)
        dumped = model.model_validate(event.data).model_dump(mode="json")
        assert dumped == json.loads(orjson.dumps(event.data)), event.type
    assert seen == {"tool.called", "tool.completed", "tool.output_delta"}


async def test_publish_writes_the_data_as_given() -> None:
    bus = EventBus(validate_payloads=True)
    await bus.start()
    data = {
        "tool_use_id": "tu_1",
        "tool_name": "noop",
        "side_effects": "none",
        "rating": None,
        "input": {"a": 1},
    }
    try:
        sub = await bus.subscribe(session_id="s")
        bus.publish("tool.called", data, session_id="s")
        async with asyncio.timeout(60):
            record = await anext(sub)
    finally:
        await bus.close()
    assert json.loads(record.text)["data"] == data


def test_bounded_structured() -> None:
    data = {"rows": ["x" * 50] * 4}
    size = len(orjson.dumps(data))
    assert bounded_structured(data, size) == (data, None)
    assert bounded_structured(data, size - 1) == (None, size)


class StructuredTool:
    """Returns a short text and ``size`` bytes of structured data."""

    definition = ToolDefinition(
        name="structured",
        description="Returns structured data.",
        input_schema={"type": "object", "properties": {"size": {"type": "integer"}}},
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text("done", data={"blob": "y" * input["size"]})

    async def cancel(self) -> bool:
        return False


async def test_structured_is_bounded_in_events(workspace: WorkspaceFileAPI) -> None:
    publisher = RecordingPublisher()
    dispatcher = ToolDispatcher(publisher, max_event_output_bytes=1024)
    dispatcher.register(StructuredTool)
    session = DispatchSession("sess_1", workspace, policy=AutoAllowPolicy())
    results = []
    for i, size in enumerate((100, 5000)):
        block = ToolUseBlock(id=f"tu_{i}", name="structured", input={"size": size})
        results.append(await dispatcher.dispatch(block, session, turn_id="t"))
    small, big = [e.data for e in publisher.events if e.type == "tool.completed"]
    assert small["structured"] == {"blob": "y" * 100}
    assert small["structured_truncated"] is False and small["structured_bytes"] is None
    assert big["structured"] is None
    assert big["structured_truncated"] is True
    assert big["structured_bytes"] == len(orjson.dumps({"blob": "y" * 5000}))
    # The model's result is the tool's own output either way.
    assert [r.text() for r in results] == ["done", "done"]
    assert not any(r.is_error for r in results)


def test_checked_result_block_equals_the_validated_one() -> None:
    from dispatcher.call import checked_result_block

    content: list[TextBlock | ImageBlock] = [
        TextBlock(text="ok"),
        ImageBlock(media_type="image/png", data="aGk="),
    ]
    fast = checked_result_block("tu_1", content, True)
    checked = ToolResultBlock(tool_use_id="tu_1", content=content, is_error=True)
    assert fast == checked
    assert fast.model_dump() == checked.model_dump()
    assert fast.model_fields_set == checked.model_fields_set
    assert fast.text() == "ok"


def test_event_content_matches_bounded_blocks() -> None:
    from dispatcher.call_events import _event_content
    from dispatcher.event_output import bounded_blocks

    image = ImageBlock(media_type="image/png", data="aGk=" * 10)
    cases: list[list[TextBlock | ImageBlock]] = [
        [TextBlock(text="ok")],
        [TextBlock(text="é" * 10), TextBlock(text="\udc80 lone surrogate")],
        [TextBlock(text="x" * 300)],  # past the limit below
        [TextBlock(text="a"), image],
        [],
    ]
    for blocks in cases:
        expected = bounded_blocks([b.model_dump() for b in blocks], 100)
        assert _event_content(ToolOutput(content=blocks), 100) == expected


def test_every_event_builder_is_a_move_of_the_table() -> None:
    """The events tables name only states of the machine, and a state that
    publishes on entry is one some move reaches."""
    from dispatcher.call import ALLOWED, ENTERING, LEAVING

    reached = {new for moves in ALLOWED.values() for new in moves}
    assert set(ENTERING) <= reached
    assert all(ALLOWED[state] for state in LEAVING)  # one leaves it
