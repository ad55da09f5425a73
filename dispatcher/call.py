"""One tool call as an explicit state machine, and the only publisher of
``tool.*`` events.

A ``ToolCall`` is made for every tool_use block the dispatcher (or the agent
loop, for calls it answers itself) handles. Beside what identifies it (the
block, the session, the turn, where its events go) it holds small groups:
``timing``, ``derived`` (what its input implies: preparation, effects,
rating), ``consent`` (the question put to a person and the answer),
``running`` (the live instance), ``pipeline`` (guardrail warnings and notes)
and ``outcome``. Its ``state`` setter is the one place a call changes state:
it checks the move against ``ALLOWED``, records it, and publishes what
``ENTERING`` and ``LEAVING`` say the move means, so each event goes out
exactly once and in order. The road (specs/pipeline.md); a stage that is not
configured is skipped (the table allows every skip forward)::

    received ─► validated ─► guarded ─► pre_hooked ─┬─► awaiting_confirmation ─► queued ─► running
                    ▲                       │        └─► planned (dry-run: recorded, nobody asked)
                    └── input rewritten ────┘
    running ─► output_validated ─► post_hooked ─► completed
    (every state but the terminal ones may also end in failed or cancelled)

=======================  ==================================================
move                     event(s) published (dispatcher/call_events.py)
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
Hook runs publish their own ``hook.completed`` (pipeline/hooks.py). Events
are typed payloads (protocol.payloads) handed to the publisher's ``emit``,
except the hot ones dispatcher/call_events.py explains (``Checked``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dispatcher import call_events
from dispatcher.call_events import Checked, Event, request_event, resolution_event
from dispatcher.elapsed import elapsed_ms
from dispatcher.errors import ToolError, ToolValidationFailed
from dispatcher.pipeline.dry_run import PlannedAction, recorded_message
from dispatcher.pipeline.guardrails import GuardrailWarning
from dispatcher.publisher import EventPublisher
from dispatcher.tool import CallRating, Tool, ToolContext, ToolEffects, ToolOutput
from protocol.canonical import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from protocol.payloads import InputError

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

# The events a move publishes, beside the moves themselves: by the state the
# call enters, and (first) by the state it leaves. A state in neither table
# is a silent move (validated, pre_hooked, queued, output_validated, ...).
EventsOf = Callable[["ToolCall"], Iterable[Event]]
ENTERING: dict[CallState, EventsOf] = {
    CallState.GUARDED: call_events.warnings,
    CallState.AWAITING_CONFIRMATION: call_events.requested,
    CallState.PLANNED: call_events.planned,
    CallState.RUNNING: call_events.called,
    CallState.COMPLETED: call_events.completed,
    CallState.FAILED: call_events.ended,
    CallState.CANCELLED: call_events.ended,
}
LEAVING: dict[CallState, EventsOf] = {
    CallState.AWAITING_CONFIRMATION: call_events.resolved,
}


def _moves() -> dict[CallState, dict[CallState, tuple[EventsOf, ...]]]:
    """The three tables above folded into one the setter reads: for each
    state, each allowed next state and the builders that move runs (leaving
    first, then entering); a move absent here is not allowed. Derived, never
    edited: benchmarks/dispatch_overhead.py shows the per-move look-ups in
    three tables as a share of a no-op call."""
    return {
        old: {
            new: tuple(
                build for build in (LEAVING.get(old), ENTERING.get(new)) if build is not None
            )
            for new in moves
        }
        for old, moves in ALLOWED.items()
    }


_MOVES = _moves()


class InvalidTransition(RuntimeError):
    """A move the table does not allow: a bug in the dispatcher, never the model's."""


# -- what a call carries, grouped -------------------------------------------------


@dataclass(slots=True)
class CallTiming:
    """When the call arrived and when it started running."""

    received: float = field(default_factory=time.perf_counter)
    # Set on entering ``running``: durations measure the run, not the wait
    # for a person.
    started: float | None = None
    # False for a call answered outside the dispatcher (cancelled before it
    # started, interrupted by a restart): it never ran, its duration is 0.
    timed: bool = True

    def duration_ms(self) -> float:
        if not self.timed:
            return 0.0
        return elapsed_ms(self.started if self.started is not None else self.received)


@dataclass(slots=True)
class Derived:
    """What the call's input implies, computed when a stage first needs it and
    dropped when a hook rewrites the input."""

    # What the tool's ``prepare`` computed, handed to every later stage.
    prepared: Any = None
    # What the tool declares the call would write, delete and run.
    effects: ToolEffects | None = None
    # Why a person must confirm whatever the policy says (the guardrails
    # could not check unknown effects); None: the policy decides.
    effects_ask: str | None = None
    rating: CallRating | None = None


@dataclass(slots=True)
class Consent:
    """The question put to a person about this call, and the answer."""

    request: ConfirmationRequest
    resolution: Resolution | None = None


@dataclass(slots=True)
class Running:
    """The live instance, and what cancelling it needs."""

    tool: Tool
    context: ToolContext
    # None until the tool first suspends (dispatcher/lazy_timeout.py).
    timeout_scope: asyncio.Timeout | None = None

    def arm(self, scope: asyncio.Timeout) -> None:
        self.timeout_scope = scope


@dataclass(slots=True)
class PipelineNotes:
    """Guardrail warnings and the text appended to the model's result."""

    warnings: list[GuardrailWarning] = field(default_factory=list)
    # How many warnings ``guardrail.warning`` events went out for.
    published: int = 0
    texts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Outcome:
    """How the call ended: ``result`` for the model, and what the events say."""

    result: ToolResultBlock | None = None
    output: ToolOutput | None = None
    error: ToolError | None = None
    invalid: list[InputError] | None = None
    # Dry-run: what was recorded instead of running.
    planned: PlannedAction | None = None
    # Refused by a guardrail or hook: tool.failed.data.blocked_by.
    blocked_by: dict[str, str] | None = None


@dataclass(slots=True, eq=False)
class ToolCall:
    """One call from receipt to outcome; see the module docstring."""

    tool_use: ToolUseBlock
    session_id: str
    turn_id: str
    # Where every event of the call goes.
    publisher: EventPublisher
    # Events carry at most this much tool output (the result keeps it all).
    max_event_output_bytes: int
    session: DispatchSession | None = None
    # None until looked up (and for a name no tool answers to).
    entry: RegisteredTool | None = None
    timing: CallTiming = field(default_factory=CallTiming)
    derived: Derived = field(default_factory=Derived)
    # None until a person is asked.
    consent: Consent | None = None
    # None until the tool runs, and again once it ended.
    running: Running | None = None
    # None until a configured pipeline stage (guardrails, hooks) adds to it.
    pipeline: PipelineNotes | None = None
    outcome: Outcome = field(default_factory=Outcome)
    cancel_requested: bool = False
    # Set when the dispatcher lets go of the call (cancellation waits on it).
    finished: asyncio.Event | None = None
    _state: CallState = CallState.RECEIVED

    # -- the state machine ---------------------------------------------------

    @property
    def state(self) -> CallState:
        return self._state

    @state.setter
    def state(self, new: CallState) -> None:
        """Check the move, record it, publish what it means (module docstring)."""
        old = self._state
        builders = _MOVES[old].get(new)
        if builders is None:
            raise InvalidTransition(f"tool call {self.tool_use.id!r}: {old} -> {new}")
        self._state = new
        if new is CallState.RUNNING:
            self.timing.started = time.perf_counter()
        for build in builders:
            for event in build(self):
                self._publish(event)

    @property
    def done(self) -> bool:
        return self._state in TERMINAL

    @property
    def input(self) -> dict[str, Any]:
        return self.tool_use.input

    @property
    def result(self) -> ToolResultBlock | None:
        return self.outcome.result

    # -- the validation stage --------------------------------------------------

    def validate(self, rewritten_by: str | None = None) -> bool:
        """True and ``validated`` when the input matches the tool's schema;
        else the call ends here as ``tool.input_invalid`` and ``result`` holds
        the answer for the model. ``rewritten_by``: the hook whose
        ``updatedInput`` this is; an invalid rewrite is the hook's fault, not
        the model's, and ends as ``tool.failed`` validation_error."""
        entry = self.entry
        assert entry is not None, "look the tool up before validating"
        tool_input = self.tool_use.input
        if entry.validator.is_valid(tool_input):
            self.state = CallState.VALIDATED
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
        from the old input is dropped."""
        use = self.tool_use
        self.tool_use = ToolUseBlock(id=use.id, name=use.name, input=new_input)
        self.derived = Derived()

    # -- what the pipeline adds ----------------------------------------------------

    def warn(self, warnings: tuple[GuardrailWarning, ...]) -> None:
        """Keep guardrail warnings: published on entering ``guarded``, and
        their text appended to the result the model sees."""
        notes = self._notes()
        for warning in warnings:
            if warning not in notes.warnings:  # a re-check after a rewrite finds them again
                notes.warnings.append(warning)
                self.note(f"[Guardrail warning ({warning.rule})]: {warning.message}")

    def note(self, text: str) -> None:
        """Text to append to the result the model sees."""
        self._notes().texts.append(text)

    def _notes(self) -> PipelineNotes:
        if self.pipeline is None:
            self.pipeline = PipelineNotes()
        return self.pipeline

    def _note_texts(self) -> list[str]:
        return self.pipeline.texts if self.pipeline is not None else []

    # -- outcomes ----------------------------------------------------------------

    def refuse(self, errors: list[InputError], text: str) -> ToolResultBlock:
        """End the call as ``tool.input_invalid`` with ``text`` for the model."""
        self.outcome.invalid = errors
        return self._end(_error_result(self.tool_use.id, text), CallState.FAILED)

    def complete(self, output: ToolOutput) -> ToolResultBlock:
        """End the call with the tool's output: ``tool.completed``, or
        ``tool.failed`` when the tool reported a handled failure as a value.
        Notes (guardrail warnings, hook reports) are appended to its content."""
        texts = self._note_texts()
        if texts:
            # A copy: a tool may hand back an output it shares between calls.
            note = TextBlock(text="\n\n" + "\n".join(texts))
            output = dataclasses.replace(output, content=[*output.content, note])
        self.outcome.output = output
        # The content was checked (a list of text and image blocks).
        result = checked_result_block(self.tool_use.id, output.content, not output.success)
        return self._end(result, CallState.COMPLETED if output.success else CallState.FAILED)

    def fail(self, err: ToolError) -> ToolResultBlock:
        """End the call on an error: ``tool.failed`` (state ``cancelled`` for a
        cancellation, ``failed`` otherwise)."""
        err.tool_use_id = self.tool_use.id
        self.outcome.error = err
        text = err.message
        if err.partial_output:
            text += f"\n\nOutput before it stopped:\n{err.partial_output}"
        cancelled = err.error_class == "cancelled"
        result = _error_result(self.tool_use.id, text)
        return self._end(result, CallState.CANCELLED if cancelled else CallState.FAILED)

    def plan(self, action: PlannedAction) -> ToolResultBlock:
        """End a dry-run call as recorded, not run: ``tool.planned`` and a
        non-error result telling the model so (with the pipeline's notes:
        a guardrail warning applies to the plan too)."""
        self.outcome.planned = action
        text = recorded_message(action)
        texts = self._note_texts()
        if texts:
            text += "\n\n" + "\n".join(texts)
        result = ToolResultBlock(
            tool_use_id=self.tool_use.id, content=[TextBlock(text=text)], is_error=False
        )
        return self._end(result, CallState.PLANNED)

    def _end(self, result: ToolResultBlock, state: CallState) -> ToolResultBlock:
        self.outcome.result = result
        self.state = state
        return result

    def emit_output(self, stream: str, text: str) -> None:
        """A chunk of output while the tool runs, as ``tool.output_delta``."""
        self._publish(call_events.output_delta(self, stream, text))

    def _publish(self, event: Event) -> None:
        if isinstance(event, Checked):
            self.publisher.publish(
                event.type, event.data, session_id=self.session_id, turn_id=self.turn_id
            )
        else:
            self.publisher.emit(event, session_id=self.session_id, turn_id=self.turn_id)


# A ToolResultBlock built as pydantic's ``model_construct`` builds it (the
# four slots of a v2 model, each set through its own descriptor), without its
# per-field loop or a validation of parts already checked.
# benchmarks/dispatch_overhead.py shows the validated constructor as one of
# the largest shares of a no-op call (benchmarks/README.md, "Dispatcher
# stages"); tests/dispatcher/test_call_events.py keeps the two equal.
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def checked_result_block(
    tool_use_id: str, content: list[TextBlock | ImageBlock], is_error: bool
) -> ToolResultBlock:
    """A result block from checked parts, not validated again (see above)."""
    block = _new(ToolResultBlock)
    fields = {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content,
        "is_error": is_error,
    }
    _set_dict(block, fields)
    _set_fields_set(block, {"tool_use_id", "content", "is_error"})
    _set_extra(block, None)  # extra="forbid": no extras
    _set_private(block, None)
    return block


def _error_result(tool_use_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=True)


def output_text(output: ToolOutput) -> str:
    """The text blocks of an output, joined."""
    return call_events.output_text(output)


__all__ = [
    "ALLOWED",
    "ENTERING",
    "LEAVING",
    "TERMINAL",
    "CallState",
    "InvalidTransition",
    "ToolCall",
    "output_text",
    "request_event",
    "resolution_event",
]
