"""Agent tools: ``dispatch_subagent`` hands a task to a sub-agent in a worker session."""

from __future__ import annotations

from dispatcher.tools.agents.dispatch import (
    AGENTS_SECTION,
    DISPATCH_SUBAGENT,
    SUBAGENT_GROUP,
    DispatchSubagentTool,
    SubagentReport,
    SubagentRequest,
    SubagentRunner,
    SubagentStatus,
)

__all__ = [
    "AGENTS_SECTION",
    "DISPATCH_SUBAGENT",
    "SUBAGENT_GROUP",
    "DispatchSubagentTool",
    "SubagentReport",
    "SubagentRequest",
    "SubagentRunner",
    "SubagentStatus",
]
