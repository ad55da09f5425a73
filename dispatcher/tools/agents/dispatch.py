"""``dispatch_subagent {task, agent_type, context?}``: delegate a sub-task.

The tool starts a sub-agent in a *worker session*, a child of the calling
session with its own empty conversation, the agent type's tools only, the
same workspace and sandbox, and waits for its answer. It returns that answer
and a short account of what the sub-agent did (tools called, files read,
steps, tokens).

The dispatcher knows nothing of sessions, turns or models, so the work is
done by a ``SubagentRunner`` the server hands the tool through its options
section (``agents`` → ``context.options["runner"]``). Without one (a
dispatcher used outside a server) the tool refuses. Its own side effects are
``none``: each call the sub-agent makes goes through the dispatcher and the
child's policy on its own. A cancelled call (the parent turn cancelled, or
the call's timeout) cancels the child's turn through ``cancel_event``, and
the runner winds it down before the call ends. The sub-agent spends the
calling session's token budget (``limits.max_tokens``, specs/agents.md
"Budgets"): over it, no sub-agent starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from dispatcher.errors import ToolCancelled, ToolExecutionError
from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from protocol.canonical import SideEffects, ToolDefinition

DISPATCH_SUBAGENT = "dispatch_subagent"
# The registry group of the agent tools: worker sessions hide it, so a
# sub-agent can never dispatch sub-agents of its own.
SUBAGENT_GROUP = "subagents"
# The tool-options section the server fills with the runner.
AGENTS_SECTION = "agents"
MAX_TASK_CHARS = 20_000
MAX_CONTEXT_CHARS = 100_000
SUBAGENT_TIMEOUT = 600.0
# How many file names the account lists before it says "and N more".
MAX_FILES_LISTED = 30

SubagentStatus = Literal["completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class SubagentRequest:
    """One delegation: who asks (session, turn, call) and what."""

    parent_session_id: str
    parent_turn_id: str
    tool_use_id: str
    task: str
    agent_type: str
    context: str | None = None


@dataclass(frozen=True, slots=True)
class SubagentReport:
    """How a sub-agent's turn ended and what it did."""

    session_id: str
    agent_type: str
    status: SubagentStatus
    answer: str
    steps: int = 0
    # Tool name -> number of calls, in first-call order.
    tools_called: Mapping[str, int] = field(default_factory=dict)
    files_read: tuple[str, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    # Why it did not complete (failed or cancelled).
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent_type": self.agent_type,
            "status": self.status,
            "steps": self.steps,
            "tools_called": dict(self.tools_called),
            "files_read": list(self.files_read),
            "usage": dict(self.usage),
            "message": self.message,
        }


class SubagentRunner(Protocol):
    """Runs one sub-agent to its end (implemented by the server).

    ``run`` returns the report also when the sub-agent failed (stopped by
    the budget it shares with its caller, too); it raises a ToolError for a
    request it refuses (an unknown agent type, a caller that is itself a
    worker, a caller whose budget is used up: ``permission_denied``). When
    ``cancel`` is set, or the awaiting task is cancelled, it cancels the
    child's turn and waits for it to end."""

    async def run(self, request: SubagentRequest, cancel: asyncio.Event) -> SubagentReport: ...


class DispatchSubagentTool(BaseTool):
    """See the module docstring."""

    definition: ToolDefinition = ToolDefinition(
        name=DISPATCH_SUBAGENT,
        description=(
            "Hand a self-contained sub-task to a sub-agent that works in its own, empty "
            "conversation (it does not see yours) on the same workspace, and get back its "
            "answer with a short account of what it did. agent_type: 'explore' (read, "
            "search and the code tools), 'review' (read and git_diff) or 'test' (read and "
            "run commands; dangerous ones are refused), or another agent the server "
            "configures for this. Sub-agents cannot edit files. Put everything it needs "
            "into task and context: it knows nothing else."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "task": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TASK_CHARS,
                    "description": "What the sub-agent should find out or check",
                },
                "agent_type": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "description": "explore, review, test, or a configured sub-agent type",
                },
                "context": {
                    "type": "string",
                    "maxLength": MAX_CONTEXT_CHARS,
                    "description": "Facts the sub-agent needs (it cannot see your conversation)",
                },
            },
            "required": ["task", "agent_type"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.NONE,
    )
    options_section: ClassVar[str | None] = AGENTS_SECTION
    # A whole agent turn of its own: ten minutes unless configured
    # (``dispatcher.tool_timeouts.dispatch_subagent``); the child is cancelled then.
    timeout: ClassVar[float | None] = SUBAGENT_TIMEOUT

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        runner = context.options.get("runner")
        if runner is None:
            raise ToolExecutionError("sub-agents are not available in this session")
        request = SubagentRequest(
            parent_session_id=context.session_id,
            parent_turn_id=context.turn_id,
            tool_use_id=context.tool_use_id,
            task=str(input["task"]),
            agent_type=str(input["agent_type"]),
            context=input.get("context"),
        )
        report: SubagentReport = await runner.run(request, context.cancel_event)
        text = render_report(report)
        if report.status == "cancelled":
            raise ToolCancelled(
                f"the sub-agent ({report.agent_type}, session {report.session_id}) was cancelled",
                partial_output=text,
            )
        return ToolOutput.text(
            text, success=report.status == "completed", metadata={"subagent": report.to_json()}
        )


def render_report(report: SubagentReport) -> str:
    """The result the calling model reads: the answer, then the account."""
    head = f"Sub-agent {report.agent_type} (session {report.session_id})"
    if report.status == "completed":
        lines = [f"{head} finished in {report.steps} step(s).", "", report.answer or "(no answer)"]
    else:
        lines = [f"{head} {report.status}: {report.message or 'no reason given'}."]
        if report.answer:
            lines += ["", "Its last words:", report.answer]
    lines += ["", "What it did:"]
    if report.tools_called:
        calls = ", ".join(f"{name} x{count}" for name, count in report.tools_called.items())
        lines.append(f"- tools called: {calls}")
    else:
        lines.append("- tools called: none")
    if report.files_read:
        shown = list(report.files_read[:MAX_FILES_LISTED])
        more = len(report.files_read) - len(shown)
        lines.append(f"- files read: {', '.join(shown)}" + (f" and {more} more" if more else ""))
    usage = report.usage
    if usage:
        lines.append(
            f"- tokens: {usage.get('input_tokens', 0)} in, {usage.get('output_tokens', 0)} out"
        )
    return "\n".join(lines)
