"""Small real tools and a recording publisher for dispatcher tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher import (
    CallRating,
    ConfirmationPreview,
    ToolCancelled,
    ToolContext,
    ToolOutput,
    WorkspaceFileAPI,
)
from eventbus.validation import validate_payload
from protocol.canonical import SideEffects, ToolDefinition
from protocol.payloads import Payload


@dataclass
class Recorded:
    type: str
    data: dict[str, Any]
    session_id: str
    turn_id: str | None


@dataclass
class RecordingPublisher:
    """Keeps every event in publish order."""

    events: list[Recorded] = field(default_factory=list)

    def publish(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> None:
        # What the bus's debug mode does: the data must be what its model accepts.
        validate_payload(type, data)
        self.events.append(Recorded(type, dict(data), session_id, turn_id))

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        # Typed payloads are recorded as the JSON clients would read.
        data = payload.model_dump(mode="json", exclude_unset=True)
        self.events.append(Recorded(str(payload.event_type), data, session_id, turn_id))

    def types(self, tool_use_id: str | None = None) -> list[str]:
        return [
            e.type
            for e in self.events
            if tool_use_id is None or e.data.get("tool_use_id") == tool_use_id
        ]

    def first(self, type: str) -> Recorded:
        return next(e for e in self.events if e.type == type)

    async def wait_for(self, type: str, count: int = 1, within: float = 60.0) -> Recorded:
        async with asyncio.timeout(within):
            while True:
                found = [e for e in self.events if e.type == type]
                if len(found) >= count:
                    return found[count - 1]
                await asyncio.sleep(0.005)


def schema(
    props: dict[str, Any] | None = None, required: list[str] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props or {}}
    if required:
        out["required"] = required
    return out


class EchoTool:
    definition = ToolDefinition(
        name="echo",
        description="Returns its text.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(input["text"])

    async def cancel(self) -> bool:
        return False


class WriteTool:
    """Writes through the workspace API; previews its diff."""

    definition = ToolDefinition(
        name="write",
        description="Writes a file.",
        input_schema=schema(
            {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]
        ),
        side_effects=SideEffects.WRITE,
    )
    path_fields = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.workspace_files.write(input["path"], input["content"])
        return ToolOutput.text("written", files_modified=[input["path"]])

    async def cancel(self) -> bool:
        return False

    async def preview(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI
    ) -> ConfirmationPreview:
        return ConfirmationPreview(
            text=f"+{input['content']}", kind="diff", projected_modifications=(input["path"],)
        )


class RatedShell:
    """An execute tool that rates `ls` safe, like the real shell does."""

    definition = ToolDefinition(
        name="rated",
        description="Pretends to run a command.",
        input_schema=schema({"command": {"type": "string"}}, ["command"]),
        side_effects=SideEffects.EXECUTE,
    )

    def rate(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> CallRating:
        return CallRating.SAFE if input["command"] == "ls" else CallRating.DANGEROUS

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(f"ran {input['command']}")

    async def cancel(self) -> bool:
        return False


class Gauge:
    """Counts how many calls run at once, and the most ever seen."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        # The instances themselves, not their ids: an id is reused once its
        # object is collected, which would make distinct instances look alike.
        self.instances: list[object] = []


def make_slow_tool(gauge: Gauge, delay: float = 0.05) -> type:
    counter = itertools.count()

    class SlowTool:
        definition = ToolDefinition(
            name="slow",
            description="Sleeps.",
            input_schema=schema({"n": {"type": "integer"}}, ["n"]),
            side_effects=SideEffects.NONE,
        )

        def __init__(self) -> None:
            self.serial = next(counter)

        async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            gauge.instances.append(self)
            gauge.running += 1
            gauge.peak = max(gauge.peak, gauge.running)
            try:
                await asyncio.sleep(delay)
            finally:
                gauge.running -= 1
            return ToolOutput.text(f"n={input['n']} serial={self.serial}")

        async def cancel(self) -> bool:
            return False

    return SlowTool


class StreamingTool:
    """Emits output, then waits for cancellation and returns what it had."""

    definition = ToolDefinition(
        name="stream",
        description="Streams until cancelled.",
        input_schema=schema(),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.emit_output("stdout", "line 1\n")
        await context.cancel_event.wait()
        return ToolOutput.text("line 1\n", success=False)

    async def cancel(self) -> bool:
        return True


class PollingTool:
    """Polls cancel_event and raises ToolCancelled, as the spec suggests."""

    definition = ToolDefinition(
        name="poll",
        description="Polls.",
        input_schema=schema(),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        for _ in range(500):
            if context.cancel_event.is_set():
                raise ToolCancelled("stopped at a poll", partial_output="partial")
            await asyncio.sleep(0.01)
        return ToolOutput.text("never cancelled")

    async def cancel(self) -> bool:
        return True


class StubbornTool:
    """Ignores cancel_event and cancel(); only the dispatcher's abandon stops it."""

    definition = ToolDefinition(
        name="stubborn",
        description="Ignores cancellation.",
        input_schema=schema(),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        await asyncio.sleep(30)
        return ToolOutput.text("finished")

    async def cancel(self) -> bool:
        return False


class SleepyTool:
    definition = ToolDefinition(
        name="sleepy",
        description="Sleeps past its timeout.",
        input_schema=schema(),
        side_effects=SideEffects.NONE,
    )
    cancels = 0

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        await asyncio.sleep(30)
        return ToolOutput.text("late")

    async def cancel(self) -> bool:
        type(self).cancels += 1
        return True


class SECRET_LEAK(Exception):
    pass


class RaisingTool:
    definition = ToolDefinition(
        name="raises",
        description="Raises an unexpected exception.",
        input_schema=schema(),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise SECRET_LEAK("api_key=sk-very-secret")

    async def cancel(self) -> bool:
        return False
