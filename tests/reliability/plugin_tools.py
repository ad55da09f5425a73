"""Tools the reliability suite's servers load as plugins (``plugins.import_paths``),
so the server subprocess runs them as it would a user's plugin.

- ``rl_echo``: returns its ``text`` (no side effects): cheap turns for load.
- ``rl_write_many``: writes ``count`` files of ``size`` bytes through the
  workspace API, reporting each one as an output line *after* it is written:
  a crash in the middle of it must leave every file whole or absent. Each
  file's content is a function of its name and ``generation``, so a test can
  tell a whole file from a torn one.
- ``rl_flood``: publishes ``count`` output events of ``size`` characters,
  yielding between bursts (a slow-consumer generator).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dispatcher import ToolContext, ToolOutput
from protocol.canonical import SideEffects, ToolDefinition


def file_content(name: str, generation: int, size: int) -> str:
    """What ``rl_write_many`` writes into ``name``: recognisable and checkable."""
    unit = f"<{name}:{generation}>"
    return (unit * (size // len(unit) + 1))[:size]


class EchoTool:
    """Returns its input text."""

    definition = ToolDefinition(
        name="rl_echo",
        description="Returns `text`.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(input["text"])

    async def cancel(self) -> bool:
        return False


class WriteManyTool:
    """Writes numbered files one after another; see the module docstring."""

    definition = ToolDefinition(
        name="rl_write_many",
        description="Writes `count` files of `size` bytes under `dir`.",
        input_schema={
            "type": "object",
            "properties": {
                "dir": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 100_000},
                "size": {"type": "integer", "minimum": 1, "maximum": 16_000_000},
                "generation": {"type": "integer", "minimum": 0},
                # Seconds to wait after each file, so a test can act mid-burst.
                "pause": {"type": "number", "minimum": 0, "maximum": 5},
            },
            "required": ["dir", "count", "size", "generation"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,  # no prompt: the crash test needs it running
    )
    path_fields = ("dir",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        files = context.workspace_files
        folder = str(input["dir"]).rstrip("/")
        for i in range(int(input["count"])):
            name = f"f{i:05d}.txt"
            content = file_content(name, int(input["generation"]), int(input["size"]))
            # Off the loop: a large write must not stall the event stream.
            await asyncio.to_thread(files.write, f"{folder}/{name}", content)
            context.emit_output("stdout", f"wrote {name}\n")
            if pause := float(input.get("pause", 0)):
                await asyncio.sleep(pause)
        return ToolOutput.text(f"wrote {input['count']} files")

    async def cancel(self) -> bool:
        return False


class FloodTool:
    """Publishes ``count`` output events of ``size`` characters."""

    definition = ToolDefinition(
        name="rl_flood",
        description="Streams a lot of output.",
        input_schema={
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 1},
                "size": {"type": "integer", "minimum": 1},
            },
            "required": ["count", "size"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        chunk = "y" * int(input["size"])
        for i in range(int(input["count"])):
            context.emit_output("stdout", chunk)
            if i % 128 == 127:
                await asyncio.sleep(0)  # let the bus commit and fan out between bursts
        return ToolOutput.text(f"flooded {input['count']}")

    async def cancel(self) -> bool:
        return False


PLUGINS = [
    "tests.reliability.plugin_tools:EchoTool",
    "tests.reliability.plugin_tools:WriteManyTool",
    "tests.reliability.plugin_tools:FloodTool",
]
