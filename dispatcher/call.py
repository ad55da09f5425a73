"""One tool call as an explicit state machine, and the only publisher of
``tool.*`` events.

A ``ToolCall`` is made for every tool_use block the dispatcher (or the agent
loop, for calls it answers itself) handles. It holds what the call's stages
need: the registered tool, the input, the session, the turn, timing,
cancellation, the tool's prepared per-call state and the outcome. Its
``state`` setter is the one place a call changes state: it checks the move
against ``ALLOWED`` and publishes the event that move means, so each event
goes out exactly once and in order. The road (specs/pipeline.md); a stage
that is not configured is skipped (the table allows every skip forward)::

    received ─► validated ─► guarded ─► pre_hooked ─┬─► awaiting_confirmation ─► queued ─► running
                    ▲                       │        └─► planned (dry-run: recorded, nobody asked)
                    └── input rewritten ────┘
    running ─► output_validated ─► post_hooked ─► completed
    (every state but the terminal ones may also end in failed or cancelled)

=======================  ==================================================
move                     event(s) published
=======================  ==================================================
→ guarded                one ``guardrail.warning`` per warning not yet
                         published (a rewritten input is checked again)
→ awaiting_confirmation  ``tool.confirmation_requested``
awaiting_confirmation →  ``tool.confirmation_resolved`` first (when an answer
                         came; not when the turn's task itself was cancelled)
→ planned                ``tool.planned`` (dry-run: recorded, not run)
→ running                ``tool.called``
→ completed              ``tool.completed`` (``structured``: the tool's data)
→ failed                 ``tool.input_invalid`` (invalid input, or a call the
                         agent loop refused), else ``tool.failed``
                         (``blocked_by`` when a guardrail or hook refused it)
→ cancelled              ``tool.failed`` with ``error_class: cancelled``
=======================  ==================================================

While running, output chunks go out as ``tool.output_delta`` (``emit_output``).
Hook runs publish their own ``hook.completed`` (pipeline/hooks.py).

Events go out through the publisher (dispatcher.publisher). The ones every
call publishes, ``tool.called`` and ``tool.completed``, and the streamed
``tool.output_delta`` are built here field by field from objects already
checked and handed to ``publish`` as the data dict: validating them measured
4-5 us per call, a quarter of the dispatcher's own overhead, and even an
unvalidated payload model cost ~1 us an event for the bus to take apart
again. The bus's debug mode (and every server test) checks that data
against the payload model; tests/dispatcher/test_call_fast_paths.py checks
that it names every field. The rarer events are payload models built
validated, through ``emit``. The result block is built by
``_result_block`` (specs/tool-dispatcher.md, "Cost of the road").
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

from dispatcher.elapsed import elapsed_ms
from dispatcher.errors import ToolError, ToolErrorClass, ToolValidationFailed
from dispatcher.event_output import bounded_blocks, bounded_text, utf8_size
from dispatcher.pipeline.dry_run import PlannedAction, recorded_message
from dispatcher.pipeline.guardrails import GuardrailWarning
from dispatcher.publisher import EventPublisher
from dispatcher.tool import CallRating, Tool, ToolContext, ToolEffects, ToolOutput
from protocol.canonical import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from protocol.payloads import GuardrailWarning as GuardrailWarningEvent
from protocol.payloads import (
    InputError,
    Payload,
    ToolConfirmationRequested,
    ToolConfirmationResolved,
    ToolFailed,
    ToolInputInvalid,
    ToolPlanned,
)

if TYPE_CHECKING:
    from dispatcher.confirmations import ConfirmationRequest, Resolution
    from dispatcher.registry import RegisteredTool
    from dispatcher.session import DispatchSession


class CallState(StrEnum):
    """Where one tool call is on its road (see the module docstring)."""

    RECEIVED = "received"
    VALIDATED = "validated"
    # Guardrails passed (warnings, if any, published).
    GUARDED = "guarded"
    # pre_tool_use hooks allowed the call (perhaps with a new input).
    PRE_HOOKED = "pre_hooked"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    # Dry-run: recorded as a planned action instead of running (terminal).
    PLANNED = "planned"
    QUEUED = "queued"
    RUNNING = "running"
    # The tool's structured output matched its output_schema.
    OUTPUT_VALIDATED = "output_validated"
    # post_tool_use hooks ran; their report is in the result.
    POST_HOOKED = "post_hooked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


_ENDS = frozenset({CallState.FAILED, CallState.CANCELLED})
# Where a call may go once it may run: confirmation, the plan, or the queue.
_ON_TO_RUN = frozenset({CallState.AWAITING_CONFIRMATION, CallState.PLANNED, CallState.QUEUED})

ALLOWED: dict[CallState, frozenset[CallState]] = {
    # Not found, invalid input, refused by the agent loop, cancelled before it started.
    CallState.RECEIVED: frozenset({CallState.VALIDATED}) | _ENDS,
    # Outside the workspace, denied by policy, or cancelled before the queue.
    CallState.VALIDATED: frozenset({CallState.GUARDED, CallState.PRE_HOOKED}) | _ON_TO_RUN | _ENDS,
    # Blocked by a hook (or anything after).
    CallState.GUARDED: frozenset({CallState.PRE_HOOKED}) | _ON_TO_RUN | _ENDS,
    # A hook rewrote the input: validation, scope and guardrails again.
    CallState.PRE_HOOKED: frozenset({CallState.VALIDATED}) | _ON_TO_RUN | _ENDS,
    # Denied, unanswered, or cancelled while waiting for a person.
    CallState.AWAITING_CONFIRMATION: frozenset({CallState.PLANNED, CallState.QUEUED}) | _ENDS,
    CallState.QUEUED: frozenset({CallState.RUNNING}) | _ENDS,
    CallState.RUNNING: frozenset(
        {CallState.OUTPUT_VALIDATED, CallState.POST_HOOKED, CallState.COMPLETED}
    )
    | _ENDS,
    # A handled failure the tool returned (success false) ends as failed.
    CallState.OUTPUT_VALIDATED: frozenset({CallState.POST_HOOKED, CallState.COMPLETED}) | _ENDS,
    CallState.POST_HOOKED: frozenset({CallState.COMPLETED}) | _ENDS,
    CallState.PLANNED: frozenset(),
    CallState.COMPLETED: frozenset(),
    CallState.FAILED: frozenset(),
    CallState.CANCELLED: frozenset(),
}
TERMINAL = frozenset(state for state, moves in ALLOWED.items() if not moves)
_VALIDATED = CallState.VALIDATED
_QUEUED = CallState.QUEUED
_GUARDED = CallState.GUARDED
_AWAITING = CallState.AWAITING_CONFIRMATION
_PLANNED = CallState.PLANNED
_RUNNING = CallState.RUNNING
_COMPLETED = CallState.COMPLETED
_FAILED = CallState.FAILED
_CANCELLED = CallState.CANCELLED


class InvalidTransition(RuntimeError):
    """A move the table does not allow: a bug in the dispatcher, never the model's."""


@dataclass(slots=True, eq=False)
class ToolCall:
    """One call from receipt to outcome; see the module docstring."""

    tool_use: ToolUseBlock
    session_id: str
    turn_id: str
    # Where every event of the call goes (see the module docstring).
    publisher: EventPublisher
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
    # What the tool declares the call would write, delete and run (derived
    # when a stage needs it: guardrails, a dry-run plan, a confirmation).
    effects: ToolEffects | None = None
    # Why a person must confirm the call whatever the policy says (the
    # guardrails could not check unknown effects); None: the policy decides.
    effects_ask: str | None = None
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
    invalid: list[InputError] | None = None
    result: ToolResultBlock | None = None
    # False for a call answered outside the dispatcher (cancelled before it
    # started, interrupted by a restart): it never ran, its duration is 0.
    timed: bool = True
    # -- the pipeline's share; None until a configured stage sets it, so an
    # unconfigured call allocates nothing for them.
    # Refused by a guardrail or hook: tool.failed.data.blocked_by.
    blocked_by: dict[str, str] | None = None
    # Guardrail warnings (each published once, on entering ``guarded``).
    warnings: list[GuardrailWarning] | None = None
    # Text appended to the result the model sees (warnings, hook reports).
    notes: list[str] | None = None
    # Dry-run: what was recorded instead of running.
    planned: PlannedAction | None = None
    _warned: int = 0
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
            self._send(resolution_event(self.resolution, self.tool_use.id))
        if new is _VALIDATED or new is _QUEUED:
            return  # the two silent moves every call makes: no more tests
        if new is _GUARDED:
            self._publish_warnings()
        elif new is _RUNNING:
            self.started = time.perf_counter()
            self.publisher.publish(
                "tool.called", self._called_data(), session_id=self.session_id, turn_id=self.turn_id
            )
        elif new is _COMPLETED:
            assert self.output is not None
            self.publisher.publish(
                "tool.completed",
                self._completed_data(self.output),
                session_id=self.session_id,
                turn_id=self.turn_id,
            )
        elif new is _AWAITING:
            assert self.request is not None, "set the request before asking"
            self._send(request_event(self.request))
        elif new is _PLANNED:
            action = self.planned
            assert action is not None, "record the plan before ending as planned"
            self._send(ToolPlanned(**action.as_dict()))
        elif new is _FAILED or new is _CANCELLED:
            if self.invalid is not None:
                self._send(
                    ToolInputInvalid(
                        tool_use_id=self.tool_use.id,
                        tool_name=self.tool_use.name,
                        errors=self.invalid,
                    )
                )
            elif self.output is not None:
                self._send(ToolFailed(**self._reported_failure_data(self.output)))
            else:
                assert self.error is not None
                self._send(ToolFailed(**self._failed_data(self.error)))

    @property
    def done(self) -> bool:
        return self._state in TERMINAL

    # -- stages ----------------------------------------------------------------

    def validate(self, rewritten_by: str | None = None) -> bool:
        """The validation stage: True and ``validated`` when the input matches
        the tool's schema; else the call ends here as ``tool.input_invalid``
        and ``result`` holds the answer for the model. ``rewritten_by``: the
        hook whose ``updatedInput`` this is; an invalid rewrite is the hook's
        fault, not the model's, and ends as ``tool.failed`` validation_error."""
        entry = self.entry
        assert entry is not None, "look the tool up before validating"
        tool_input = self.tool_use.input
        if entry.validator.is_valid(tool_input):
            self.state = _VALIDATED
            return True
        errors = entry.validator.errors(tool_input)
        lines = "\n".join(f"- {e}" for e in errors)
        if rewritten_by is not None:
            self.fail(
                ToolValidationFailed(
                    f"The input hook {rewritten_by!r} rewrote is invalid for tool "
                    f"{entry.name!r}:\n{lines}",
                    validation_errors=[str(e) for e in errors],
                )
            )
            return False
        self.refuse(
            [{"path": e.path, "message": e.message} for e in errors],
            f"Invalid input for tool {entry.name!r}:\n{lines}",
        )
        return False

    def rewrite(self, new_input: dict[str, Any]) -> None:
        """Take a pre_tool_use hook's ``updatedInput`` as the call's input
        (the caller validates, scopes and guards it again); what was derived
        from the old input (preparation, effects) is dropped."""
        use = self.tool_use
        self.tool_use = ToolUseBlock(id=use.id, name=use.name, input=new_input)
        self.prepared = self.effects = self.effects_ask = None

    def warn(self, warnings: tuple[GuardrailWarning, ...]) -> None:
        """Keep guardrail warnings: published on entering ``guarded``, and
        their text appended to the result the model sees."""
        known = self.warnings
        if known is None:
            known = self.warnings = []
        for warning in warnings:
            if warning not in known:  # a re-check after a rewrite finds them again
                known.append(warning)
                self.note(f"[Guardrail warning ({warning.rule})]: {warning.message}")

    def note(self, text: str) -> None:
        """Text to append to the result the model sees."""
        if self.notes is None:
            self.notes = []
        self.notes.append(text)

    @property
    def input(self) -> dict[str, Any]:
        return self.tool_use.input

    # -- outcomes ----------------------------------------------------------------

    def refuse(self, errors: list[InputError], text: str) -> ToolResultBlock:
        """End the call as ``tool.input_invalid`` with ``text`` for the model."""
        self.invalid = errors
        self.result = _error_result(self.tool_use.id, text)
        self.state = CallState.FAILED
        return self.result

    def complete(self, output: ToolOutput) -> ToolResultBlock:
        """End the call with the tool's output: ``tool.completed``, or
        ``tool.failed`` when the tool reported a handled failure as a value.
        Notes (guardrail warnings, hook reports) are appended to its content."""
        if self.notes:
            # A copy: a tool may hand back an output it shares between calls.
            note = TextBlock(text="\n\n" + "\n".join(self.notes))
            output = dataclasses.replace(output, content=[*output.content, note])
        self.output = output
        # The content was checked (a list of blocks); skip re-validation.
        self.result = _result_block(self.tool_use.id, output.content, not output.success)
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

    def plan(self, action: PlannedAction) -> ToolResultBlock:
        """End a dry-run call as recorded, not run: ``tool.planned`` and a
        non-error result telling the model so (with the pipeline's notes:
        a guardrail warning applies to the plan too)."""
        self.planned = action
        text = recorded_message(action)
        if self.notes:
            text += "\n\n" + "\n".join(self.notes)
        self.result = _result_block(self.tool_use.id, [TextBlock(text=text)], False)
        self.state = _PLANNED
        return self.result

    def emit_output(self, stream: str, text: str) -> None:
        """A chunk of output while the tool runs, as ``tool.output_delta``."""
        shown, size = bounded_text(text, self.max_event_output_bytes)
        data: dict[str, Any] = {"tool_use_id": self.tool_use.id, "stream": stream, "text": shown}
        if size is not None:
            data["truncated"] = True
            data["output_bytes"] = size
        self.publisher.publish(
            "tool.output_delta", data, session_id=self.session_id, turn_id=self.turn_id
        )

    # -- payloads ------------------------------------------------------------------

    def _send(self, payload: Payload) -> None:
        self.publisher.emit(payload, session_id=self.session_id, turn_id=self.turn_id)

    def _publish_warnings(self) -> None:
        """``guardrail.warning`` for each warning not published yet."""
        warnings = self.warnings
        if not warnings:
            return
        for warning in warnings[self._warned :]:
            self._send(
                GuardrailWarningEvent(
                    rule=warning.rule, message=warning.message, tool_use_id=self.tool_use.id
                )
            )
        self._warned = len(warnings)

    def _duration_ms(self) -> float:
        return elapsed_ms(self.started if self.started is not None else self.received)

    def _called_data(self) -> dict[str, Any]:
        entry = self.entry
        assert entry is not None
        return {
            "tool_use_id": self.tool_use.id,
            "tool_name": entry.name,
            "side_effects": entry.side_effects_name,
            "rating": self.rating.value if self.rating else None,
            "input": self.tool_use.input,
        }

    def _completed_data(self, output: ToolOutput) -> dict[str, Any]:
        """Every field of ``tool.completed``, as the event's data."""
        limit = self.max_event_output_bytes
        content, output_bytes, truncated = _event_content(output.content, limit)
        # Validated against the output_schema when the tool declares one.
        structured = output.data
        structured_bytes = None
        if structured is not None:
            structured, structured_bytes = bounded_structured(structured, limit)
        return {
            "tool_use_id": self.tool_use.id,
            "tool_name": self.tool_use.name,
            "duration_ms": self._duration_ms(),
            "content": content,
            "files_modified": output.files_modified,
            "command_executed": output.command_executed,
            "metadata": output.metadata,
            "truncated": truncated,
            "output_bytes": output_bytes,
            "structured": structured,
            "structured_truncated": structured_bytes is not None,
            "structured_bytes": structured_bytes,
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
        if self.blocked_by is not None:
            data["blocked_by"] = self.blocked_by
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


def bounded_structured(
    data: dict[str, Any], limit: int
) -> tuple[dict[str, Any] | None, int | None]:
    """``(structured as tool.completed carries it, its JSON size if left out)``:
    past ``limit`` bytes of JSON the event carries null, as it cuts content
    (the model's result is not affected). Data orjson cannot encode is left
    as it is: the bus refuses it with the same error as before."""
    try:
        size = len(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return data, None
    return (data, None) if size <= limit else (None, size)


# A ToolResultBlock built as pydantic's ``model_construct`` builds it (the
# four slots of a v2 model, each set through its own descriptor: ~0.04 us,
# where ``object.__setattr__`` finds the descriptor by name on every call),
# without its per-field loop: ~0.5 us against 2.2 per call. ``type`` is the
# one field the caller never sets.
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _result_block(
    tool_use_id: str, content: list[TextBlock | ImageBlock], is_error: bool
) -> ToolResultBlock:
    """A result block from checked parts (no validation)."""
    block = _new(ToolResultBlock)
    _set_dict(
        block,
        {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": is_error,
        },
    )
    _set_fields_set(block, {"tool_use_id", "content", "is_error"})
    _set_extra(block, None)  # extra="forbid": no extras
    _set_private(block, None)
    return block


def _event_content(
    blocks: list[TextBlock | ImageBlock], limit: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """``bounded_blocks`` of the output's blocks as JSON, with a shortcut for
    the usual output (text only, within the limit): sizes from ``isascii``
    instead of an encode per block, and no second copy of each block."""
    out: list[dict[str, Any]] = []
    total = 0
    for block in blocks:
        if type(block) is not TextBlock:
            break
        text = block.text
        total += len(text) if text.isascii() else utf8_size(text)
        out.append({"type": "text", "text": text})
    else:
        if total <= limit:
            return out, total, False
    return bounded_blocks([_block_json(b) for b in blocks], limit)


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


def request_event(request: ConfirmationRequest) -> ToolConfirmationRequested:
    """The one builder of ``tool.confirmation_requested``: a call's question,
    and (server/gate_consent.py) a quality gate's, which no call carries."""
    return ToolConfirmationRequested(**request.event_data())


def resolution_event(resolution: Resolution, tool_use_id: str) -> ToolConfirmationResolved:
    """The one builder of ``tool.confirmation_resolved``: a call's own answer, and
    (server/cluster.py) a lost replica's pending requests that a survivor ends
    ``cancelled`` when no call is left to answer them."""
    return ToolConfirmationResolved(**resolution.event_data(tool_use_id))
