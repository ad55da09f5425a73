"""Turns: one assistant message's worth of work, run in a background task.

A TurnRunner does the work of one kind of turn. ``ToolUsesRunner`` runs a
client-supplied assistant message (``{"tool_uses": [...]}``) through the
dispatcher. The agent loop (``{"message": ...}``) plugs in as another runner
(see ``TurnSupervisor(message_runner=...)``) with the same context: it can
append messages, dispatch tool calls and publish events, and it learns of a
cancellation through ``TurnContext.cancel_requested``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher import DispatchSession, ToolDispatcher
from dispatcher.event_output import event_message
from dispatcher.publisher import EventPublisher
from protocol.canonical import Message, ToolResultBlock, ToolUseBlock, text_result
from protocol.payloads import MessageCompleted, Payload
from server.store import MessageRecord, TurnFailureReason

if TYPE_CHECKING:
    from dispatcher.memory import MemoryService
    from server.config import Config
    from server.store import Store
    from server.tree_budget import TreeBudgets


@dataclass(slots=True)
class TurnContext:
    """What a runner sees of its turn."""

    session_id: str
    turn_id: str
    request: dict[str, Any]
    dispatch_session: DispatchSession
    dispatcher: ToolDispatcher
    publisher: EventPublisher
    append_message: Callable[[Message], MessageRecord]
    # Set when a client cancels the turn; a runner must not start new work after it.
    cancel_requested: asyncio.Event = field(default_factory=asyncio.Event)
    # Model usage so far; a runner keeps it current so that a turn whose task is
    # cancelled (shutdown) still records what its model calls cost.
    usage: dict[str, int] | None = None
    # Tokens the turn's sub-agents used (dispatch_subagent, server/subagents.py);
    # the agent loop adds them to its own usage, so the turn's usage covers both.
    subagent_usage: dict[str, int] = field(default_factory=dict)
    # A dry-run turn (the request's ``dry_run`` or the session's): write and
    # execute calls are recorded in the session's ``planned``, not run.
    dry_run: bool = False

    def emit(self, payload: Payload) -> None:
        """Publish a typed payload in this turn."""
        self.publisher.emit(payload, session_id=self.session_id, turn_id=self.turn_id)

    async def dispatch_all(self, blocks: list[ToolUseBlock]) -> list[ToolResultBlock]:
        """Run one assistant message's calls through the dispatcher, as a
        dry-run when the turn is one."""
        return await self.dispatcher.dispatch_all(
            blocks, self.dispatch_session, turn_id=self.turn_id, dry_run=self.dry_run
        )

    def add_subagent_usage(self, usage: dict[str, int]) -> None:
        """Roll a finished sub-agent's token usage up into this turn's."""
        for key, value in usage.items():
            self.subagent_usage[key] = self.subagent_usage.get(key, 0) + value
        if self.usage is not None:
            # Kept current for a turn whose task ends without an outcome.
            for key, value in usage.items():
                self.usage[key] = self.usage.get(key, 0) + value

    def publish_message(self, message: Message) -> None:
        """``message.completed`` for an appended message, its tool results cut to
        the events' output limit (the conversation keeps them whole)."""
        limit = self.dispatcher.max_event_output_bytes
        shown = event_message(message.model_dump(mode="json"), limit)
        self.emit(MessageCompleted(message=shown))  # type: ignore[arg-type]  # JSON of a Message


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """Why a runner ended its turn as failed without raising: ``reason`` is the
    turn's reason (e.g. ``model_error``, ``step_limit``), ``message`` says what
    happened, ``details`` go into the ``turn.failed`` event as extra keys."""

    reason: TurnFailureReason
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class TurnOutcome:
    """What a finished turn hands back: the tool results (in call order) and
    model usage, if a model was called. ``failure`` set: the turn failed (its
    results and usage are still recorded). ``details`` are extra keys for the
    ``turn.completed`` event (the agent loop's step count and stop reason)."""

    results: list[ToolResultBlock]
    usage: dict[str, int] | None = None
    failure: TurnFailure | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # The quality gates' outcome when they ran at the turn's end (see
    # server/turn_pipeline.py gates_summary); kept in the turn record.
    quality_gates: list[dict[str, Any]] | None = None


class TurnRunner(Protocol):
    """Runs one kind of turn. It must append every message it produces (so the
    conversation survives a restart) and answer every tool_use it stored with a
    tool_result, even when cancelled."""

    async def run(self, ctx: TurnContext) -> TurnOutcome: ...


@dataclass(frozen=True, slots=True)
class RunnerParts:
    """What a message runner is built from (``create_app``'s
    ``message_runner_factory`` receives it once the services started their
    store): the configuration, the state store, the memory store (None when
    it could not open) and the budgets of session trees."""

    config: Config
    store: Store
    memories: MemoryService | None
    budgets: TreeBudgets


MessageRunnerFactory = Callable[[RunnerParts], "TurnRunner | None"]


class ToolUsesRunner:
    """The client plays the model: its tool_use blocks become the assistant
    message, the dispatcher runs them (concurrently, capped per session), and
    the results become the tool message."""

    async def run(self, ctx: TurnContext) -> TurnOutcome:
        blocks = [ToolUseBlock.model_validate(b) for b in ctx.request["tool_uses"]]
        assistant = Message(role="assistant", content=list(blocks))
        ctx.append_message(assistant)
        ctx.publish_message(assistant)
        try:
            results = await ctx.dispatch_all(blocks)
        except asyncio.CancelledError:
            # Shutdown cancels the task: the conversation still gets an answer
            # for every call, so it stays valid for the model afterwards.
            answer_unanswered(ctx, blocks, "the server stopped before the call finished")
            raise
        tool_message = Message(role="tool", content=list(results))
        ctx.append_message(tool_message)
        ctx.publish_message(tool_message)
        return TurnOutcome(results=results)


def answer_unanswered(
    ctx: TurnContext, blocks: list[ToolUseBlock], reason: str
) -> list[ToolResultBlock]:
    """Append a tool message with an error result for each of ``blocks``."""
    results = [interrupted_result(b.id, reason) for b in blocks]
    ctx.append_message(Message(role="tool", content=list(results)))
    return results


def interrupted_result(tool_use_id: str, reason: str) -> ToolResultBlock:
    return text_result(tool_use_id, f"Interrupted: {reason}.", is_error=True)
