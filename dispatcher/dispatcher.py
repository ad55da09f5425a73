"""ToolDispatcher: the one road every tool call takes.

``dispatch`` receives a call (a ``ToolCall``, dispatcher/call.py: its states
and the events each move publishes), looks the tool up (the session's
profile and tool filter decide what it may see) and validates the input;
``_run`` then reads as the list of the road's stages (specs/pipeline.md):
workspace scope, guardrails on the effects the tool declares, pre_tool_use
hooks (which may block or rewrite the input: a rewrite is validated,
scoped and guarded again), the tool's preparation and rating, the
confirmation policy and a person's answer (dispatcher/confirmation_stage.py),
a dry-run's plan, the session's queue and the run under a timeout
(dispatcher/execution.py), output validation and post_tool_use hooks
(dispatcher/stages.py). Every failure on that road ends as a tool_result
with ``is_error: true`` and an event; nothing but the caller's own
cancellation escapes ``dispatch``. A stage the session does not configure
returns at once.

Calls the agent loop answers without running them (malformed arguments, a
turn cancelled before they started) and calls a restart interrupted end
through ``refuse``, ``cancelled_before_start`` and ``interrupted``, so every
``tool.*`` event still comes from ToolCall.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from dispatcher import stages
from dispatcher.call import ToolCall
from dispatcher.confirmation_stage import Confirmation, decide, policy_query
from dispatcher.confirmations import ConfirmationBroker
from dispatcher.errors import (
    ToolCancelled,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolValidationFailed,
)
from dispatcher.event_output import DEFAULT_MAX_EVENT_OUTPUT_BYTES
from dispatcher.execution import DEFAULT_CANCEL_GRACE, Execution
from dispatcher.policy import ConfirmMode, denies_outright
from dispatcher.publisher import EventPublisher, NullPublisher
from dispatcher.registry import RegisteredTool, ToolRegistry
from dispatcher.session import DispatchSession
from dispatcher.stages import ValidatedCall
from dispatcher.tool import ToolFactory, ToolOutput
from protocol.canonical import TextBlock, ToolDefinition, ToolResultBlock, ToolUseBlock

log = logging.getLogger("toolrelay.dispatcher")

# (session id, paths a call modified): see ToolDispatcher's on_files_modified.
FilesModifiedHook = Callable[[str, Sequence[str]], None]


class ToolDispatcher:
    """Registers tools and runs tool calls for sessions; see the module docstring."""

    def __init__(
        self,
        publisher: EventPublisher | None = None,
        *,
        broker: ConfirmationBroker | None = None,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        max_event_output_bytes: int = DEFAULT_MAX_EVENT_OUTPUT_BYTES,
        on_files_modified: FilesModifiedHook | None = None,
    ) -> None:
        if max_event_output_bytes < 1:
            raise ValueError(
                f"max_event_output_bytes must be positive, got {max_event_output_bytes!r}"
            )
        # Events carry at most this much tool output (the result block keeps it all).
        self.max_event_output_bytes = max_event_output_bytes
        self._registry = ToolRegistry()
        # Where every event of a call goes (dispatcher.call explains how).
        self._publisher: EventPublisher = publisher or NullPublisher()
        self.broker = broker or ConfirmationBroker()
        self._confirmation = Confirmation(self.broker)
        self._execution = Execution(cancel_grace)
        # Told (session id, paths) of every call that reports modified files
        # (the server's code index marks them dirty).
        self._on_files_modified = on_files_modified
        self._in_flight: dict[str, set[ToolCall]] = {}

    @property
    def cancel_grace(self) -> float:
        """How long a cancelled tool may run on before it is abandoned."""
        return self._execution.cancel_grace

    @cancel_grace.setter
    def cancel_grace(self, seconds: float) -> None:
        self._execution.cancel_grace = seconds

    # -- registry ---------------------------------------------------------

    def register(
        self, factory: ToolFactory, *, group: str | None = None, timeout: float | None = None
    ) -> ToolDefinition:
        """Register a zero-argument factory; raises ToolRegistrationError.
        ``timeout`` overrides the tool's own default (see RegisteredTool.timeout)."""
        return self._registry.register(factory, group=group, timeout=timeout).definition

    def unregister(self, name: str) -> None:
        self._registry.unregister(name)

    def names(self) -> list[str]:
        return self._registry.names()

    def definitions_for(self, session: DispatchSession) -> list[ToolDefinition]:
        """Definitions of the tools this session may see."""
        return [e.definition for e in self.entries_for(session)]

    def entries_for(self, session: DispatchSession) -> list[RegisteredTool]:
        """The registered tools this session may see, with their operational
        metadata (effective ``timeout``, ``options_section``), by name. A tool
        its policy denies outright is not offered (dispatcher/policy.py)."""
        policy, sandboxed, profile = session.policy, session.sandbox is not None, session.profile
        return [
            e
            for e in self._registry.entries()
            if self._visible(e, session)
            and not denies_outright(
                policy, policy_query(session, e, None), sandboxed=sandboxed, profile=profile
            )
        ]

    @staticmethod
    def _visible(entry: RegisteredTool, session: DispatchSession) -> bool:
        """Hidden groups, the profile's tool globs, the agent's tool filter."""
        if entry.group is not None and entry.group in session.hidden_groups:
            return False
        profile = session.profile
        if profile is not None and not profile.allows(entry.name):
            return False
        tool_filter = session.tool_filter
        return tool_filter is None or tool_filter(entry.name)

    def end_turn(self, session: DispatchSession, turn_id: str) -> None:
        """Forget what the dispatcher counted for a finished turn (the files it
        modified, for ``max_files_modified``). The turn's dry-run plan stays in
        ``session.planned`` for the server to pop."""
        session.turn_counters.pop(turn_id, None)

    # -- the road of one call ---------------------------------------------

    async def dispatch_all(
        self,
        blocks: Sequence[ToolUseBlock],
        session: DispatchSession,
        *,
        turn_id: str,
        dry_run: bool = False,
    ) -> list[ToolResultBlock]:
        """Dispatch one assistant message's calls concurrently (the session's cap
        bounds how many run at once); results come back in block order.
        ``dry_run``: this turn is a dry-run (so is every turn of a session
        created with ``dry_run``)."""
        seen: set[str] = set()
        jobs = []
        for block in blocks:
            if block.id in seen:
                jobs.append(self._duplicate(block, session, turn_id))
            else:
                seen.add(block.id)
                jobs.append(self.dispatch(block, session, turn_id=turn_id, dry_run=dry_run))
        return list(await asyncio.gather(*jobs))

    async def _duplicate(
        self, block: ToolUseBlock, session: DispatchSession, turn_id: str
    ) -> ToolResultBlock:
        call = self._receive(block, session, turn_id)
        err = ToolValidationFailed(f"tool_use id {block.id!r} appears twice in one message")
        return call.fail(err)

    async def dispatch(
        self,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        *,
        turn_id: str,
        dry_run: bool = False,
        on_output: Callable[[ToolOutput], object] | None = None,
    ) -> ToolResultBlock:
        """Run one call end to end. Never raises except for the caller's own
        cancellation. ``dry_run`` (or ``session.dry_run``): a write, execute
        or network call is recorded in ``session.planned[turn_id]``, not run.
        ``on_output`` receives the tool's output of a call that completed (its
        ``data`` validated): a caller that needs more than the model's view,
        such as the MCP endpoint's ``structuredContent``, takes it there."""
        call = self._receive(tool_use, session, turn_id)
        entry = self._look_up(call, session)
        if entry is None or not call.validate():
            assert call.result is not None
            return call.result
        v = ValidatedCall.of(call, entry, session, dry_run or session.dry_run)
        output = await self._run_in_flight(v)
        if output is None:
            # Ended on the road (an error, a plan in a dry-run, an invalid rewrite).
            assert call.result is not None
            return call.result
        result = call.complete(output)
        if on_output is not None and not result.is_error:
            on_output(output)
        return result

    def _look_up(self, call: ToolCall, session: DispatchSession) -> RegisteredTool | None:
        """The tool the call names, if this session may see it; else the call
        ends ``not_found``."""
        entry = self._registry.get(call.tool_use.name)
        if entry is None or not self._visible(entry, session):
            call.fail(
                ToolNotFound(f"no tool named {call.tool_use.name!r} is available in this session")
            )
            return None
        call.entry = entry
        return entry

    async def _run_in_flight(self, v: ValidatedCall) -> ToolOutput | None:
        """``_run``, with the call counted in flight (cancellation finds it
        there) and every error turned into the call's end."""
        call, session_id = v.call, v.session.session_id
        calls = self._in_flight.setdefault(session_id, set())
        calls.add(call)
        try:
            return await self._run(v)
        except ToolError as err:
            call.fail(err)
        except asyncio.CancelledError:
            # The caller (the turn) was cancelled: still tell every client.
            call.fail(ToolCancelled("the call was cancelled before it finished"))
            raise
        except Exception:
            # A bug in a stage or in the dispatcher itself; still an error result.
            log.exception("dispatch of %s (%s) failed", call.tool_use.name, call.tool_use.id)
            call.fail(
                ToolExecutionError(
                    f"{call.tool_use.name} failed with an internal error; details are in "
                    "the server log",
                    is_user_visible=False,
                )
            )
        finally:
            # The context's emit_output points back at the call: drop the cycle
            # so the call is freed at once, not by the cyclic GC.
            call.running = None
            if call.finished is not None:
                call.finished.set()
            calls.discard(call)
            if not calls:
                self._in_flight.pop(session_id, None)
        return None

    async def _run(self, v: ValidatedCall) -> ToolOutput | None:
        """The stages after validation, in the road's order; each raises a
        ToolError to end the call. None: the call ended on the way without
        one (``call.result`` holds how). A stage the session does not
        configure is one test here (specs/pipeline.md)."""
        stages.check_scope(v)
        if v.guardrails is not None:
            await stages.guard(v, v.guardrails)
        if v.hooks is not None:
            rewritten = await stages.pre_hooks(v, v.hooks)
            if rewritten is None:
                return None
            v = rewritten
        stages.prepare(v)
        stages.rate(v)
        mode = decide(v)
        if v.dry_run and await stages.record_plan(v, mode):
            return None
        if mode is not ConfirmMode.AUTO:
            await self._confirmation.confirm(v, mode)
        output = await self._execution.run(v)
        if v.entry.output_validator is not None:
            stages.check_output(v, v.entry.output_validator, output)
        if v.guardrails is not None:
            stages.count_files(v, output)
        if self._on_files_modified is not None and output.files_modified:
            self._on_files_modified(v.session.session_id, output.files_modified)
        if v.hooks is not None:
            await stages.post_hooks(v, v.hooks, output)
        return output

    def _receive(self, tool_use: ToolUseBlock, session: DispatchSession, turn_id: str) -> ToolCall:
        return ToolCall(
            tool_use,
            session.session_id,
            turn_id,
            self._publisher,
            self.max_event_output_bytes,
            session,
        )

    # -- calls answered without running ------------------------------------

    def refuse(
        self, block: ToolUseBlock, session: DispatchSession, *, turn_id: str, reason: str
    ) -> ToolResultBlock:
        """Answer a call whose arguments could not be read (not a JSON object,
        over a limit) so the model can retry it: ``tool.input_invalid`` with
        one error at path ``""``; the tool does not run."""
        call = self._receive(block, session, turn_id)
        # The reason quotes the start of what the model sent, so it can see its mistake.
        text = (
            f"Invalid input for tool {block.name!r}: {reason}\n"
            "The tool did not run. Call it again with its arguments as one JSON object "
            "that matches its input_schema."
        )
        return call.refuse([{"path": "", "message": reason}], text)

    def cancelled_before_start(
        self, block: ToolUseBlock, session: DispatchSession, *, turn_id: str
    ) -> ToolResultBlock:
        """Answer a call the turn was cancelled before it could start:
        ``tool.failed`` with ``error_class: cancelled`` and no duration."""
        call = self._receive(block, session, turn_id)
        # Unlike a call cancelled in the dispatcher, this one never reached a tool.
        return _untimed_cancel(
            call,
            "the turn was cancelled before the call started",
            "Cancelled: the turn was cancelled before the call started.",
        )

    def interrupted(
        self, block: ToolUseBlock, session_id: str, *, turn_id: str, reason: str
    ) -> ToolResultBlock:
        """Answer a call whose dispatch never finished (the server stopped):
        ``tool.failed`` with ``error_class: cancelled``, no duration, and the
        result ``Interrupted: <reason>.``. Needs no live DispatchSession, so
        recovery after a restart can use it."""
        call = ToolCall(block, session_id, turn_id, self._publisher, self.max_event_output_bytes)
        return _untimed_cancel(call, reason, f"Interrupted: {reason}.")

    # -- cancellation -----------------------------------------------------

    async def cancel_session_tools(self, session_id: str) -> None:
        """Cancel every call of a session: pending confirmations settle as
        'cancelled', running tools get their cancel_event set and ``cancel()``
        called, and a tool still running after the grace period is abandoned."""
        self.broker.cancel_session(session_id)
        calls = list(self._in_flight.get(session_id, ()))
        for call in calls:
            call.cancel_requested = True
        await asyncio.gather(*(self._execution.cancel(c) for c in calls if c.running is not None))

    def in_flight(self, session_id: str) -> int:
        return len(self._in_flight.get(session_id, ()))


def _untimed_cancel(call: ToolCall, reason: str, text: str) -> ToolResultBlock:
    """End a call that never ran as cancelled (duration 0), with ``text`` as
    the model's result."""
    call.timing.timed = False
    call.fail(ToolCancelled(reason))
    result = ToolResultBlock(
        tool_use_id=call.tool_use.id, content=[TextBlock(text=text)], is_error=True
    )
    call.outcome.result = result
    return result
