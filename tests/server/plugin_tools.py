"""Real tools the server tests load as plugins (``plugins.import_paths``), so the
server subprocess runs them exactly as it would a user's plugin."""

from __future__ import annotations

import asyncio
from typing import Any

from dispatcher import ConfirmationPreview, ToolContext, ToolOutput, WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition


class BlockTool:
    """Runs until cancelled (or ``seconds`` pass), emitting one output line first."""

    definition = ToolDefinition(
        name="block",
        description="Waits until cancelled or until `seconds` have passed.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.emit_output("stdout", "blocking\n")
        try:
            async with asyncio.timeout(float(input["seconds"])):
                await context.cancel_event.wait()
        except TimeoutError:
            return ToolOutput.text("waited")
        return ToolOutput.text("blocking\n", success=False)

    async def cancel(self) -> bool:
        return True


class NoisyTool:
    """Emits ``count`` output chunks of ``size`` characters as fast as it can."""

    definition = ToolDefinition(
        name="noisy",
        description="Streams a lot of output.",
        input_schema={
            "type": "object",
            "properties": {"count": {"type": "integer"}, "size": {"type": "integer"}},
            "required": ["count", "size"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        chunk = "x" * int(input["size"])
        for i in range(int(input["count"])):
            context.emit_output("stdout", chunk)
            if i % 256 == 255:
                await asyncio.sleep(0)  # let the bus's writer commit between bursts
        return ToolOutput.text(f"emitted {input['count']}")

    async def cancel(self) -> bool:
        return False


class NoteTool:
    """A write tool with a diff preview, writing through the workspace API."""

    definition = ToolDefinition(
        name="note",
        description="Writes a note file.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
    )
    path_fields = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        context.workspace_files.write(input["path"], input["text"])
        return ToolOutput.text(f"wrote {input['path']}", files_modified=[input["path"]])

    async def cancel(self) -> bool:
        return False

    async def preview(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI
    ) -> ConfirmationPreview:
        return ConfirmationPreview(
            text=f"+{input['text']}", kind="diff", projected_modifications=(input["path"],)
        )


PLUGINS = [
    "tests.server.plugin_tools:BlockTool",
    "tests.server.plugin_tools:NoisyTool",
    "tests.server.plugin_tools:NoteTool",
]
