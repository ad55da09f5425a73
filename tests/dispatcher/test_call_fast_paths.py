"""The dispatch hot path's shortcuts build what the validated constructors
build, and ``tool.completed`` bounds ``structured`` as it bounds content.

- ``call._result_block`` (no validation) equals a validated ToolResultBlock;
- ``Payload.trusted_from`` equals the class call, extras kept;
- ``bus.emit`` writes a payload's fields and extras as ``data``;
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
from dispatcher.call import _result_block, bounded_structured
from eventbus import EventBus
from protocol.canonical import (
    ImageBlock,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol.payloads import ToolCalled, ToolCompleted
from tests.dispatcher.support import RecordingPublisher

COMPLETED: dict[str, Any] = {
    "tool_use_id": "tu_1",
    "tool_name": "noop",
    "duration_ms": 0.5,
    "content": [{"type": "text", "text": "ok"}],
    "files_modified": None,
    "command_executed": None,
    "metadata": {"k": 1},
    "truncated": False,
    "output_bytes": 2,
    "structured": {"n": 1},
    "structured_truncated": False,
    "structured_bytes": None,
}


def test_result_block_equals_the_validated_one() -> None:
    content: list[TextBlock | ImageBlock] = [
        TextBlock(text="ok"),
        ImageBlock(media_type="image/png", data="aGk="),
    ]
    fast = _result_block("tu_1", content, True)
    checked = ToolResultBlock(tool_use_id="tu_1", content=content, is_error=True)
    assert fast == checked
    assert fast.model_dump() == checked.model_dump()
    assert fast.model_fields_set == checked.model_fields_set
    assert fast.text() == "ok"


def test_trusted_from_equals_the_class_call() -> None:
    fast = ToolCompleted.trusted_from(dict(COMPLETED))
    assert fast == ToolCompleted(**COMPLETED)
    assert fast.model_dump() == ToolCompleted(**COMPLETED).model_dump()
    # Defaults the caller leaves out are filled in; unknown keys stay extras.
    partial = {k: v for k, v in COMPLETED.items() if not k.startswith("structured")}
    called = ToolCompleted.trusted_from({**partial, "note": "x"})
    assert called.structured is None and called.structured_truncated is False
    assert called.model_extra == {"note": "x"}
    assert called == ToolCompleted.model_validate({**partial, "note": "x"})


async def test_emit_writes_fields_and_extras() -> None:
    bus = EventBus()
    await bus.start()
    try:
        sub = await bus.subscribe(session_id="s")
        bus.emit(
            ToolCalled.trusted(
                tool_use_id="tu_1",
                tool_name="noop",
                side_effects="none",
                rating=None,
                input={"a": 1},
                extra_key="kept",
            ),
            session_id="s",
        )
        async with asyncio.timeout(5):
            record = await anext(sub)
    finally:
        await bus.close()
    data = json.loads(record.text)["data"]
    assert data == {
        "tool_use_id": "tu_1",
        "tool_name": "noop",
        "side_effects": "none",
        "input": {"a": 1},
        "rating": None,
        "extra_key": "kept",
    }


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


def test_event_content_matches_bounded_blocks() -> None:
    from dispatcher.call import _block_json, _event_content
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
        expected = bounded_blocks([_block_json(b) for b in blocks], 100)
        assert _event_content(blocks, 100) == expected
