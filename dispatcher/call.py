"""One tool call as an explicit state machine, and the only publisher of
``tool.*`` events.

A ``ToolCall`` is made for every tool_use block the dispatcher (or the agent
loop, for calls it answers itself) handles. It holds what the call's stages
need: the registered tool, the input, the session, the turn, timing,
cancellation, the tool's prepared per-call state and the outcome. Its
``state`` setter is the one place a call changes state: it checks the move
against ``ALLOWED`` and publishes the event that move means, so each event
goes out exactly once and in order::

    received ──► validated ──┬──────────────────────────────┬──► queued ──► running ──► completed
        │            │       └──► awaiting_confirmation ────┘      │           │
        │            │                     │                       │           │
        └────────────┴─────────────────────┴───────────────────────┴───────────┴──► failed
                                                                                 └──► cancelled

=======================  ==================================================
move                     event(s) published
=======================  ==================================================
→ awaiting_confirmation  ``tool.confirmation_requested``
awaiting_confirmation →  ``tool.confirmation_resolved`` first (when an answer
                         came; not when the turn's task itself was cancelled)
→ running                ``tool.called``
→ completed              ``tool.completed``
→ failed                 ``tool.input_invalid`` (invalid input, or a call the
                         agent loop refused), else ``tool.failed``
→ cancelled              ``tool.failed`` with ``error_class: cancelled``
=======================  ==================================================

While running, output chunks go out as ``tool.output_delta`` (``emit_output``).
Stages the pipeline issue inserts (guardrails, pre/post hooks, dry-run,
output validation) become new members of ``CallState`` and new rows of
``ALLOWED``; the setter needs no change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher.errors import ToolError, ToolErrorClass
from dispatcher.event_output import bounded_blocks, bounded_text
from dispatcher.tool import CallRating, Tool, ToolContext, ToolOutput
from protocol.canonical import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock

if TYPE_CHECKING:
    from dispatcher.confirmations import ConfirmationRequest, Resolution
    from dispatcher.registry import RegisteredTool
    from dispatcher.session import DispatchSession


class CallState(StrEnum):
    """Where one tool call is on its road (see the module docstring)."""

    RECEIVED = "received"
    VALIDATED = "validated"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


_ENDS = frozenset({CallState.FAILED, CallState.CANCELLED})

ALLOWED: dict[CallState, frozenset[CallState]] = {
    # Not found, invalid input, refused by the agent loop, cancelled before it started.
    CallState.RECEIVED: frozenset({CallState.VALIDATED}) | _ENDS,
    # Outside the workspace, denied by policy, or cancelled before the queue.
    CallState.VALIDATED: frozenset({CallState.AWAITING_CONFIRMATION, CallState.QUEUED}) | _ENDS,
    # Denied, unanswered, or cancelled while waiting for a person.
    CallState.AWAITING_CONFIRMATION: frozenset({CallState.QUEUED}) | _ENDS,
    CallState.QUEUED: frozenset({CallState.RUNNING}) | _ENDS,
    CallState.RUNNING: frozenset({CallState.COMPLETED}) | _ENDS,
    CallState.COMPLETED: frozenset(),
    CallState.FAILED: frozenset(),
    CallState.CANCELLED: frozenset(),
}
TERMINAL = frozenset(state for state, moves in ALLOWED.items() if not moves)
_VALIDATED = CallState.VALIDATED
_AWAITING = CallState.AWAITING_CONFIRMATION
_RUNNING = CallState.RUNNING
_COMPLETED = CallState.COMPLETED
_FAILED = CallState.FAILED
_CANCELLED = CallState.CANCELLED


class InvalidTransition(RuntimeError):
    """A move the table does not allow: a bug in the dispatcher, never the model's."""


class Publish(Protocol):
    """The bus's ``publish`` (see dispatcher.publisher.EventPublisher)."""

    def __call__(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None: ...


@dataclass(slots=True, eq=False)
class ToolCall:
    """One call from receipt to outcome; see the module docstring."""

    tool_use: ToolUseBlock
    session_id: str
    turn_id: str
    publish: Publish
    # Events carry at most this much tool output (the result keeps it all).
    max_event_output_bytes: int
    session: DispatchSession | None = None
    # None until looked up (and for a name no tool answers to).
    entry: RegisteredTool | None = None
    received: float = field(default_factory=time.perf_counter)
    # When tool.called went out: durations measure the run, not the wait for a person.
    started: float | None = None
    rating: CallRating | None = None
    # What the tool's ``prepare`` computed, handed to every later stage.
    prepared: Any = None
    request: ConfirmationRequest | None = None
    resolution: Resolution | None = None
    # The running instance and what cancellation needs of it.
    tool: Tool | None = None
    context: ToolContext | None = None
    timeout_scope: asyncio.Timeout | None = None
    cancel_requested: bool = False
    finished: asyncio.Event | None = None
    # The outcome: exactly one of these is set when the call ends.
    output: ToolOutput | None = None
    error: ToolError | None = None
    invalid: list[dict[str, str]] | None = None
    result: ToolResultBlock | None = None
    # False for a call answered outside the dispatcher (cancelled before it
    # started, interrupted by a restart): it never ran, its duration is 0.
    timed: bool = True
    _state: CallState = CallState.RECEIVED

    # -- the state machine ---------------------------------------------------

    @property
    def state(self) -> CallState:
        return self._state

    @state.setter
    def state(self, new: CallState) -> None:
        """Move to ``new`` and publish what the move means (module docstring)."""
        old = self._state
        if new not in ALLOWED[old]:
            raise InvalidTransition(f"tool call {self.tool_use.id!r}: {old} -> {new}")
        self._state = new
        # Members are compared through module constants: reading an enum
        # member off its class costs a descriptor call, and this runs four
        # times per call.
        if old is _AWAITING and self.resolution is not None:
            self._emit("tool.confirmation_resolved", self.resolution.event_data(self.tool_use.id))
        if new is _RUNNING:
            self.started = time.perf_counter()
            self.publish(
                "tool.called",
                self._called_data(),
                session_id=self.session_id,
                turn_id=self.turn_id,
            )
        elif new is _COMPLETED:
            assert self.output is not None
            self.publish(
                "tool.completed",
                self._completed_data(self.output),
                session_id=self.session_id,
                turn_id=self.turn_id,
            )
        elif new is _AWAITING:
            assert self.request is not None, "set the request before asking"
            self._emit("tool.confirmation_requested", self.request.event_data())
        elif new is _FAILED or new is _CANCELLED:
            if self.invalid is not None:
                self._emit(
                    "tool.input_invalid",
                    {
                        "tool_use_id": self.tool_use.id,
                        "tool_name": self.tool_use.name,
                        "errors": self.invalid,
                    },
                )
            elif self.output is not None:
                self._emit("tool.failed", self._reported_failure_data(self.output))
            else:
                assert self.error is not None
                self._emit("tool.failed", self._failed_data(self.error))

    @property
    def done(self) -> bool:
        return self._state in TERMINAL

    # -- stages ----------------------------------------------------------------

    def validate(self) -> bool:
        """The validation stage: True and ``validated`` when the input matches
        the tool's schema; else the call ends here as ``tool.input_invalid``
        and ``result`` holds the answer for the model."""
        entry = self.entry
        assert entry is not None, "look the tool up before validating"
        tool_input = self.tool_use.input
        if entry.validator.is_valid(tool_input):
            self.state = _VALIDATED
            return True
        errors = entry.validator.errors(tool_input)
        lines = "\n".join(f"- {e}" for e in errors)
        self.refuse(
            [{"path": e.path, "message": e.message} for e in errors],
            f"Invalid input for tool {entry.name!r}:\n{lines}",
        )
        return False

    @property
    def input(self) -> dict[str, Any]:
        return self.tool_use.input

    # -- outcomes ----------------------------------------------------------------

    def refuse(self, errors: list[dict[str, str]], text: str) -> ToolResultBlock:
        """End the call as ``tool.input_invalid`` with ``text`` for the model."""
        self.invalid = errors
        self.result = _error_result(self.tool_use.id, text)
        self.state = CallState.FAILED
        return self.result

    def complete(self, output: ToolOutput) -> ToolResultBlock:
        """End the call with the tool's output: ``tool.completed``, or
        ``tool.failed`` when the tool reported a handled failure as a value."""
        self.output = output
        # The content was checked (a list of blocks); skip re-validation.
        self.result = ToolResultBlock.model_construct(
            tool_use_id=self.tool_use.id, content=output.content, is_error=not output.success
        )
        self.state = _COMPLETED if output.success else _FAILED
        return self.result

    def fail(self, err: ToolError) -> ToolResultBlock:
        """End the call on an error: ``tool.failed`` (state ``cancelled`` for a
        cancellation, ``failed`` otherwise)."""
        err.tool_use_id = self.tool_use.id
        self.error = err
        text = err.message
        if err.partial_output:
            text += f"\n\nOutput before it stopped:\n{err.partial_output}"
        self.result = _error_result(self.tool_use.id, text)
        cancelled = err.error_class == "cancelled"
        self.state = _CANCELLED if cancelled else _FAILED
        return self.result

    def emit_output(self, stream: str, text: str) -> None:
        """A chunk of output while the tool runs, as ``tool.output_delta``."""
        shown, size = bounded_text(text, self.max_event_output_bytes)
        data: dict[str, Any] = {"tool_use_id": self.tool_use.id, "stream": stream, "text": shown}
        if size is not None:
            data["truncated"] = True
            data["output_bytes"] = size
        self._emit("tool.output_delta", data)

    # -- payloads ------------------------------------------------------------------

    def _emit(self, type: str, data: Mapping[str, Any]) -> None:
        self.publish(type, data, session_id=self.session_id, turn_id=self.turn_id)

    def _duration_ms(self) -> float:
        since = self.started if self.started is not None else self.received
        return round((time.perf_counter() - since) * 1000, 3)

    def _called_data(self) -> dict[str, Any]:
        entry = self.entry
        assert entry is not None
        return {
            "tool_use_id": self.tool_use.id,
            "tool_name": entry.name,
            "side_effects": entry.definition.side_effects.value,
            "rating": self.rating.value if self.rating else None,
            "input": self.tool_use.input,
        }

    def _completed_data(self, output: ToolOutput) -> dict[str, Any]:
        content, output_bytes, truncated = bounded_blocks(
            [_block_json(b) for b in output.content], self.max_event_output_bytes
        )
        return {
            "tool_use_id": self.tool_use.id,
            "tool_name": self.tool_use.name,
            "duration_ms": self._duration_ms(),
            "content": content,
            "truncated": truncated,
            "output_bytes": output_bytes,
            "files_modified": output.files_modified,
            "command_executed": output.command_executed,
            "metadata": output.metadata,
        }

    def _reported_failure_data(self, output: ToolOutput) -> dict[str, Any]:
        """``tool.failed`` for a failure the tool returned as a value."""
        limit = self.max_event_output_bytes
        duration_ms = self._duration_ms()
        _, output_bytes, truncated = bounded_blocks([_block_json(b) for b in output.content], limit)
        return {
            "tool_use_id": self.tool_use.id,
            "tool_name": self.tool_use.name,
            "error_class": ToolErrorClass.EXECUTION_ERROR.value,
            "message": bounded_text(output_text(output), limit)[0],
            "duration_ms": duration_ms,
            "partial_output": None,
            "metadata": output.metadata,
            "truncated": truncated,
            "output_bytes": output_bytes,
        }

    def _failed_data(self, err: ToolError) -> dict[str, Any]:
        limit = self.max_event_output_bytes
        partial_output = err.partial_output
        data: dict[str, Any] = {
            "tool_use_id": self.tool_use.id,
            "tool_name": self.tool_use.name,
            "error_class": err.error_class.value,
            "message": bounded_text(err.message, limit)[0],
            "duration_ms": self._duration_ms() if self.timed else 0.0,
            "partial_output": partial_output,
        }
        if partial_output:
            # The event carries at most the limit of it; the result keeps all.
            shown, size = bounded_text(partial_output, limit)
            if size is not None:
                data.update(partial_output=shown, truncated=True, output_bytes=size)
        return data


def output_text(output: ToolOutput) -> str:
    """The text blocks of an output, joined."""
    return "".join(b.text for b in output.content if isinstance(b, TextBlock))


def _block_json(block: TextBlock | ImageBlock) -> dict[str, Any]:
    """A block as JSON; text built by hand, as ``model_dump`` would give it
    (text blocks allow no other keys) at a fraction of its per-call cost."""
    if type(block) is TextBlock:
        return {"type": "text", "text": block.text}
    return block.model_dump()


def _error_result(tool_use_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=True)


__all__ = [
    "ALLOWED",
    "TERMINAL",
    "CallState",
    "InvalidTransition",
    "ToolCall",
    "output_text",
]
