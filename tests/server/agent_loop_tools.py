"""A plugin tool for the agent-loop tests, loaded by the server subprocess
(``plugins.import_paths``) like any user's plugin.

``rendezvous`` proves that one assistant message's tool calls run at the same
time, and how many at most: each call of a ``group`` waits until ``size`` calls
of the group have arrived, then reports the largest number of the group's calls
that were running at once. Counts, not clocks: the answer is the same on a slow
machine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dispatcher import ToolContext, ToolOutput
from protocol.canonical import SideEffects, ToolDefinition


@dataclass
class _Group:
    arrived: int = 0
    inside: int = 0
    peak: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class RendezvousTool:
    """Waits for ``size`` calls of ``group`` (at most ``wait`` seconds); reports the peak."""

    definition = ToolDefinition(
        name="rendezvous",
        description="Waits until `size` calls of `group` have arrived, then reports how "
        "many calls of the group ran at the same time at most.",
        input_schema={
            "type": "object",
            "properties": {
                "group": {"type": "string"},
                "size": {"type": "integer", "minimum": 1},
                "wait": {"type": "number"},
            },
            "required": ["group", "size"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )
    # Shared by every instance in the server process (the dispatcher builds one per call).
    groups: ClassVar[dict[str, _Group]] = {}

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        group = self.groups.setdefault(str(input["group"]), _Group())
        size = int(input["size"])
        group.arrived += 1
        group.inside += 1
        group.peak = max(group.peak, group.inside)
        if group.arrived >= size:
            group.ready.set()
        try:
            async with asyncio.timeout(float(input.get("wait", 5.0))):
                await group.ready.wait()
        except TimeoutError:
            return ToolOutput.text(f"only {group.arrived} of {size} calls arrived", success=False)
        finally:
            group.inside -= 1
        return ToolOutput.text(f"peak {group.peak}")

    async def cancel(self) -> bool:
        return False


AGENT_LOOP_PLUGINS = ["tests.server.agent_loop_tools:RendezvousTool"]
