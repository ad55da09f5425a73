"""Tools the benchmark server loads as plugins (``plugins.import_paths``).

- ``bench_emit`` publishes ``count`` output events, each stamped with
  ``time.monotonic_ns()`` at the moment it is published, either as fast as it
  can or paced at ``rate`` events per second (the fan-out benchmark).
- ``bench_confirm`` is a no-op with side effects ``write``, so the default
  policy asks for a confirmation every time (the round-trip benchmark).
- ``bench_sleep`` sleeps and reports the most calls it saw running at once
  (the scale benchmark's concurrent tools).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from dispatcher import ToolContext, ToolOutput
from protocol.canonical import SideEffects, ToolDefinition

# Publishing never waits, so a tight loop would hold the event loop for the
# whole burst; yielding every so often lets the bus commit and fan out.
_YIELD_EVERY = 256


class EmitTool:
    """Publishes stamped ``tool.output_delta`` events; see the module docstring."""

    definition = ToolDefinition(
        name="bench_emit",
        description="Publishes `count` stamped output events (paced at `rate`/s if > 0).",
        input_schema={
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
                "rate": {"type": "number", "minimum": 0},
                "size": {"type": "integer", "minimum": 0, "maximum": 65_536},
            },
            "required": ["count"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        count = int(input["count"])
        rate = float(input.get("rate", 0))
        pad = "x" * int(input.get("size", 0))
        emit = context.emit_output
        if rate <= 0:
            for i in range(count):
                emit("stdout", f"{time.monotonic_ns()}|{pad}")
                if i % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)
        else:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i in range(count):
                # An absolute schedule: a late tick does not push the later ones back.
                delay = start + i / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                emit("stdout", f"{time.monotonic_ns()}|{pad}")
        return ToolOutput.text(f"emitted {count}")

    async def cancel(self) -> bool:
        return False


class ConfirmTool:
    """A write tool that writes nothing: the cost measured is the confirmation."""

    definition = ToolDefinition(
        name="bench_confirm",
        description="Asks for a confirmation, then does nothing.",
        input_schema={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text("ok")

    async def cancel(self) -> bool:
        return False


class SleepTool:
    """Sleeps ``seconds``; the result names the peak number of calls in flight."""

    definition = ToolDefinition(
        name="bench_sleep",
        description="Sleeps, counting how many calls run at once.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
            "required": ["seconds"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )
    # Class-level: one server process, all calls of this tool.
    running: ClassVar[int] = 0
    peak: ClassVar[int] = 0

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        cls = type(self)
        cls.running += 1
        cls.peak = max(cls.peak, cls.running)
        try:
            await asyncio.sleep(float(input["seconds"]))
        finally:
            cls.running -= 1
        return ToolOutput.text(f"peak={cls.peak}", metadata={"peak": cls.peak})

    async def cancel(self) -> bool:
        return True
