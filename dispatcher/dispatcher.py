"""ToolDispatcher: the one road every tool call takes.

For each tool_use block: look the tool up, validate the input, check workspace
paths, apply the confirmation policy, announce the call, build a fresh
instance, run it under a timeout, announce the outcome, and hand back a
canonical tool_result. Every failure on that road ends as a tool_result with
``is_error: true`` and an event; nothing but the caller's own cancellation
escapes ``dispatch``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from dispatcher.confirmations import ConfirmationBroker, ConfirmationRequest, RememberedAnswer
from dispatcher.errors import (
    ConfirmationTimeout,
    ToolCancelled,
    ToolError,
    ToolErrorClass,
    ToolExecutionError,
    ToolNotFound,
    ToolPermissionDenied,
    ToolTimeout,
    ToolUserDenied,
    ToolValidationError,
)
from dispatcher.event_output import DEFAULT_MAX_EVENT_OUTPUT_BYTES, bounded_blocks, bounded_text
from dispatcher.policy import ConfirmMode, PolicyQuery, sandbox_floor
from dispatcher.publisher import EventPublisher, NullPublisher
from dispatcher.registry import RegisteredTool, ToolRegistry
from dispatcher.session import DispatchSession
from dispatcher.tool import (
    CallRating,
    ConfirmationPreview,
    GrantScope,
    Tool,
    ToolContext,
    ToolFactory,
    ToolHooks,
    ToolOutput,
)
from protocol.canonical import (
    ImageBlock,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)

log = logging.getLogger("toolrelay.dispatcher")

DEFAULT_CANCEL_GRACE = 30.0  # how long a cancelled tool may take before it is abandoned
CLEANUP_TIMEOUT = 5.0  # bound on a tool's own cancel() during cleanup
SUMMARY_CHARS = 200
PREVIEW_CHARS = 8_000
_EMPTY: Mapping[str, Any] = {}


@dataclass(slots=True, eq=False)
class _Call:
    """One call in flight, as cancellation needs to see it."""

    tool_use_id: str
    tool: Tool | None = None
    context: ToolContext | None = None
    scope: asyncio.Timeout | None = None
    cancel_requested: bool = False
    finished: asyncio.Event | None = None
    done: bool = False
    # When tool.called went out: durations measure the run, not the wait for a person.
    started: float | None = None


class ToolDispatcher:
    """Registers tools and runs tool calls for sessions; see the module docstring."""

    def __init__(
        self,
        publisher: EventPublisher | None = None,
        *,
        broker: ConfirmationBroker | None = None,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        max_event_output_bytes: int = DEFAULT_MAX_EVENT_OUTPUT_BYTES,
    ) -> None:
        if max_event_output_bytes < 1:
            raise ValueError(
                f"max_event_output_bytes must be positive, got {max_event_output_bytes!r}"
            )
        # Events carry at most this much tool output (the result block keeps it all).
        self.max_event_output_bytes = max_event_output_bytes
        self._registry = ToolRegistry()
        self._publish = (publisher or NullPublisher()).publish
        self.broker = broker or ConfirmationBroker()
        self.cancel_grace = cancel_grace
        self._in_flight: dict[str, set[_Call]] = {}
        self._loggers: dict[str, logging.Logger] = {}

    # -- registry ---------------------------------------------------------

    def register(
        self, factory: ToolFactory, *, group: str | None = None, timeout: float | None = None
    ) -> ToolDefinition:
        """Register a zero-argument factory; raises ToolRegistrationError."""
        entry = self._registry.register(factory, group=group, timeout=timeout)
        self._loggers[entry.name] = logging.getLogger(f"toolrelay.tools.{entry.name}")
        return entry.definition

    def unregister(self, name: str) -> None:
        self._registry.unregister(name)
        self._loggers.pop(name, None)

    def names(self) -> list[str]:
        return self._registry.names()

    def definitions_for(self, session: DispatchSession) -> list[ToolDefinition]:
        """Definitions of the tools this session may see."""
        return [e.definition for e in self._registry.entries() if self._visible(e, session)]

    @staticmethod
    def _visible(entry: RegisteredTool, session: DispatchSession) -> bool:
        return entry.group is None or entry.group not in session.hidden_groups

    # -- dispatch ---------------------------------------------------------

    async def dispatch_all(
        self, blocks: Sequence[ToolUseBlock], session: DispatchSession, *, turn_id: str
    ) -> list[ToolResultBlock]:
        """Dispatch one assistant message's calls concurrently (the session's cap
        bounds how many run at once); results come back in block order."""
        if len(blocks) == 1:
            return [await self.dispatch(blocks[0], session, turn_id=turn_id)]
        seen: set[str] = set()
        jobs = []
        for block in blocks:
            if block.id in seen:
                jobs.append(self._duplicate(block, session, turn_id))
            else:
                seen.add(block.id)
                jobs.append(self.dispatch(block, session, turn_id=turn_id))
        return list(await asyncio.gather(*jobs))

    async def _duplicate(
        self, block: ToolUseBlock, session: DispatchSession, turn_id: str
    ) -> ToolResultBlock:
        err = ToolValidationError(f"tool_use id {block.id!r} appears twice in one message")
        return self._failed(err, block, session, turn_id, time.perf_counter())

    async def dispatch(
        self, tool_use: ToolUseBlock, session: DispatchSession, *, turn_id: str
    ) -> ToolResultBlock:
        """Run one call end to end. Never raises except for the caller's own cancellation."""
        started = time.perf_counter()
        entry = self._registry.get(tool_use.name)
        if entry is None or not self._visible(entry, session):
            err = ToolNotFound(f"no tool named {tool_use.name!r} is available in this session")
            return self._failed(err, tool_use, session, turn_id, started)
        if not entry.validator.is_valid(tool_use.input):
            return self._input_invalid(entry, tool_use, session, turn_id)

        call = _Call(tool_use.id)
        calls = self._in_flight.setdefault(session.session_id, set())
        calls.add(call)
        try:
            output = await self._run(entry, tool_use, session, turn_id, call)
        except ToolError as err:
            return self._failed(err, tool_use, session, turn_id, call.started or started)
        except asyncio.CancelledError:
            # The caller (the turn) was cancelled: still tell every client.
            cancelled = ToolCancelled("the call was cancelled before it finished")
            self._failed(cancelled, tool_use, session, turn_id, call.started or started)
            raise
        except Exception:
            # A bug in a hook or in the dispatcher itself; still an error result.
            log.exception("dispatch of %s (%s) failed", tool_use.name, tool_use.id)
            internal = ToolExecutionError(
                f"{tool_use.name} failed with an internal error; details are in the server log",
                is_user_visible=False,
            )
            return self._failed(internal, tool_use, session, turn_id, call.started or started)
        finally:
            call.done = True
            if call.finished is not None:
                call.finished.set()
            calls.discard(call)
            if not calls:
                self._in_flight.pop(session.session_id, None)
        return self._completed(entry, tool_use, output, session, turn_id, call.started or started)

    async def _run(
        self,
        entry: RegisteredTool,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        turn_id: str,
        call: _Call,
    ) -> ToolOutput:
        tool_input = tool_use.input
        # Step 3: every path argument must stay inside the workspace.
        for name in entry.path_fields:
            value = tool_input.get(name)
            if isinstance(value, str):
                session.workspace.resolve(value)
        # Step 4: the confirmation policy.
        rating = self._rate(entry, tool_input, session)
        mode = session.policy.mode_for(
            PolicyQuery(
                entry.name, entry.definition.side_effects, rating, session.workspace.workspace_root
            )
        )
        # The one place where "auto-approval is a privilege of the sandbox" holds:
        # outside a sandbox an execute-class call always asks (yolo aside).
        mode = sandbox_floor(
            mode,
            entry.definition.side_effects,
            sandboxed=session.sandbox is not None,
            policy=session.policy,
        )
        if mode is ConfirmMode.DENY:
            raise ToolPermissionDenied(
                f"the confirmation policy denies {entry.name!r} in this session"
            )
        if mode is not ConfirmMode.AUTO:
            await self._confirm(entry, tool_use, session, turn_id, rating, mode)
        if call.cancel_requested:
            raise ToolCancelled("the call was cancelled before it started")
        async with session.semaphore:
            if call.cancel_requested:
                raise ToolCancelled("the call was cancelled before it started")
            # Step 5: announce; steps 6-7: fresh instance, run under a timeout.
            call.started = time.perf_counter()
            self._publish(
                "tool.called",
                {
                    "tool_use_id": tool_use.id,
                    "tool_name": entry.name,
                    "side_effects": entry.definition.side_effects.value,
                    "rating": rating.value if rating else None,
                    "input": tool_input,
                },
                session_id=session.session_id,
                turn_id=turn_id,
            )
            return await self._execute(entry, tool_use, session, turn_id, call)

    def _rate(
        self, entry: RegisteredTool, tool_input: dict[str, Any], session: DispatchSession
    ) -> CallRating | None:
        try:
            return ToolHooks.rate(entry.probe, tool_input, session.workspace)
        except ToolError:
            raise  # the tool refuses this call outright (a blocklisted command)
        except Exception:
            # A rating that cannot be computed must not lower the bar.
            log.exception("rating %s failed; treating the call as dangerous", entry.name)
            return CallRating.DANGEROUS

    async def _confirm(
        self,
        entry: RegisteredTool,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        turn_id: str,
        rating: CallRating | None,
        mode: ConfirmMode,
    ) -> None:
        scope = self._scope(entry, tool_use.input, session)
        answers = [session.remembered.get((entry.name, key)) for key, _ in scope.parts]
        if any(a is not None and a.decision == "deny" for a in answers):
            raise ToolUserDenied(f"the user denied {entry.name!r} for the rest of this session")
        # Covered only when every part has a grant at its rating or higher.
        if all(
            a is not None and a.allows(part_rating)
            for a, (_, part_rating) in zip(answers, scope.parts, strict=True)
        ):
            return
        preview = await self._preview(entry, tool_use.input, session)
        request = ConfirmationRequest(
            request_id=self.broker.new_request_id(),
            session_id=session.session_id,
            turn_id=turn_id,
            tool_use_id=tool_use.id,
            tool_name=entry.name,
            side_effects=entry.definition.side_effects,
            rating=rating,
            input_summary=_summary(entry.name, tool_use.input),
            projected_modifications=preview.projected_modifications,
            preview_kind=preview.kind,
            # Cut only past what must be seen whole (a shell's command and env).
            preview_text=preview.text[: max(PREVIEW_CHARS, preview.keep)],
            expires_at=self.broker.expiry(session.confirmation_timeout),
            scope_text=scope.text,
        )
        self._publish(
            "tool.confirmation_requested",
            request.event_data(),
            session_id=session.session_id,
            turn_id=turn_id,
        )
        resolution = await self.broker.ask(request, answer_within=session.confirmation_timeout)
        self._publish(
            "tool.confirmation_resolved",
            resolution.event_data(tool_use.id),
            session_id=session.session_id,
            turn_id=turn_id,
        )
        decision = resolution.decision
        if decision == "allow":
            if resolution.scope == "session" or mode is ConfirmMode.PROMPT_ONCE:
                for key, part_rating in scope.parts:
                    known = session.remembered.get((entry.name, key))
                    if known is not None and known.allows(part_rating):
                        continue  # never narrow a wider grant
                    session.remembered[(entry.name, key)] = RememberedAnswer("allow", part_rating)
            return
        if decision == "deny":
            if mode is ConfirmMode.PROMPT_ONCE:
                for key, _ in scope.parts:
                    session.remembered[(entry.name, key)] = RememberedAnswer("deny")
            reason = f" Reason given: {resolution.message}" if resolution.message else ""
            raise ToolUserDenied(f"User denied this operation.{reason}")
        if decision == "timeout":
            raise ConfirmationTimeout(
                f"no one answered the confirmation request within "
                f"{session.confirmation_timeout:g} s"
            )
        raise ToolCancelled("the call was cancelled while waiting for confirmation")

    def _scope(
        self, entry: RegisteredTool, tool_input: dict[str, Any], session: DispatchSession
    ) -> GrantScope:
        try:
            return ToolHooks.scope(entry.probe, entry.name, tool_input, session.workspace)
        except Exception:
            # A scope that cannot be computed grants only this exact call's input.
            log.exception("scope of %s failed; granting nothing wider than the call", entry.name)
            exact = json.dumps(tool_input, sort_keys=True, default=str)
            return GrantScope(((f"= {exact}", None),), f"allow this exact {entry.name} call")

    async def _preview(
        self, entry: RegisteredTool, tool_input: dict[str, Any], session: DispatchSession
    ) -> ConfirmationPreview:
        fallback_paths = tuple(
            v
            for name in entry.path_fields
            if isinstance(v := tool_input.get(name), str)
            and entry.definition.side_effects is not SideEffects.READ
        )
        try:
            preview = await ToolHooks.preview(
                entry.probe, tool_input, session.workspace, sandbox=session.sandbox
            )
        except ToolError as err:
            return ConfirmationPreview(
                text=f"(no preview: {err.message})", projected_modifications=fallback_paths
            )
        except Exception:
            log.exception("preview of %s failed", entry.name)
            return ConfirmationPreview(
                text="(no preview: it failed; see the server log)",
                projected_modifications=fallback_paths,
            )
        if preview is None:
            text = json.dumps(tool_input, indent=2, ensure_ascii=False, default=str)
            return ConfirmationPreview(text=text, projected_modifications=fallback_paths)
        return preview

    async def _execute(
        self,
        entry: RegisteredTool,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        turn_id: str,
        call: _Call,
    ) -> ToolOutput:
        tool = entry.factory()
        context = ToolContext(
            session_id=session.session_id,
            turn_id=turn_id,
            tool_use_id=tool_use.id,
            workspace_path=session.workspace.workspace_root,
            workspace_files=session.workspace,
            cancel_event=asyncio.Event(),
            logger=self._loggers[entry.name],
            options=session.tool_options.get(entry.name, _EMPTY),
            emit_output=partial(self._emit_output, session.session_id, turn_id, tool_use.id),
            sandbox=session.sandbox,
        )
        call.tool, call.context = tool, context
        try:
            async with asyncio.timeout(entry.timeout) as scope:
                call.scope = scope
                output = await tool.execute(tool_use.input, context)
        except TimeoutError:
            if call.cancel_requested:
                raise ToolCancelled(
                    f"{entry.name} ignored cancellation for {self.cancel_grace:g} s and "
                    "was abandoned"
                ) from None
            await _cleanup(tool, entry.name)
            raise ToolTimeout(f"{entry.name} timed out after {entry.timeout:g} s") from None
        except ToolError as err:
            if call.cancel_requested and not isinstance(err, ToolCancelled):
                raise ToolCancelled(f"{entry.name} was cancelled: {err.message}") from err
            raise
        except asyncio.CancelledError:
            await _cleanup(tool, entry.name)
            raise
        except Exception as exc:
            # The traceback goes to the log; the model sees only a redacted line.
            context.logger.error("tool %s raised", entry.name, exc_info=exc)
            raise ToolExecutionError(
                f"{entry.name} failed with an internal error ({type(exc).__name__}); "
                "details are in the server log",
                underlying=exc,
                is_user_visible=False,
            ) from exc
        if not isinstance(output, ToolOutput) or not all(
            isinstance(b, TextBlock | ImageBlock) for b in output.content
        ):
            raise ToolExecutionError(
                f"{entry.name} returned {type(output).__name__} that is not a ToolOutput of "
                "text and image blocks",
                is_user_visible=False,
            )
        if call.cancel_requested:
            raise ToolCancelled(f"{entry.name} was cancelled", partial_output=_output_text(output))
        return output

    def _emit_output(
        self, session_id: str, turn_id: str, tool_use_id: str, stream: str, text: str
    ) -> None:
        shown, size = bounded_text(text, self.max_event_output_bytes)
        data: dict[str, Any] = {"tool_use_id": tool_use_id, "stream": stream, "text": shown}
        if size is not None:
            data["truncated"] = True
            data["output_bytes"] = size
        self._publish("tool.output_delta", data, session_id=session_id, turn_id=turn_id)

    # -- outcomes ---------------------------------------------------------

    def _completed(
        self,
        entry: RegisteredTool,
        tool_use: ToolUseBlock,
        output: ToolOutput,
        session: DispatchSession,
        turn_id: str,
        started: float,
    ) -> ToolResultBlock:
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        content, output_bytes, truncated = bounded_blocks(
            [b.model_dump() for b in output.content], self.max_event_output_bytes
        )
        if not output.success:
            # A handled failure the tool reported as a value, not an exception.
            self._publish(
                "tool.failed",
                {
                    "tool_use_id": tool_use.id,
                    "tool_name": entry.name,
                    "error_class": ToolErrorClass.EXECUTION_ERROR.value,
                    "message": bounded_text(_output_text(output), self.max_event_output_bytes)[0],
                    "duration_ms": duration_ms,
                    "partial_output": None,
                    "metadata": output.metadata,
                    "truncated": truncated,
                    "output_bytes": output_bytes,
                },
                session_id=session.session_id,
                turn_id=turn_id,
            )
        else:
            self._publish(
                "tool.completed",
                {
                    "tool_use_id": tool_use.id,
                    "tool_name": entry.name,
                    "duration_ms": duration_ms,
                    "content": content,
                    "truncated": truncated,
                    "output_bytes": output_bytes,
                    "files_modified": output.files_modified,
                    "command_executed": output.command_executed,
                    "metadata": output.metadata,
                },
                session_id=session.session_id,
                turn_id=turn_id,
            )
        # The content was checked above (a list of blocks); skip re-validation.
        return ToolResultBlock.model_construct(
            tool_use_id=tool_use.id, content=output.content, is_error=not output.success
        )

    def _input_invalid(
        self,
        entry: RegisteredTool,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        turn_id: str,
    ) -> ToolResultBlock:
        errors = entry.validator.errors(tool_use.input)
        self._publish(
            "tool.input_invalid",
            {
                "tool_use_id": tool_use.id,
                "tool_name": entry.name,
                "errors": [{"path": e.path, "message": e.message} for e in errors],
            },
            session_id=session.session_id,
            turn_id=turn_id,
        )
        lines = "\n".join(f"- {e}" for e in errors)
        return _error_result(tool_use.id, f"Invalid input for tool {entry.name!r}:\n{lines}")

    def _failed(
        self,
        err: ToolError,
        tool_use: ToolUseBlock,
        session: DispatchSession,
        turn_id: str,
        started: float,
    ) -> ToolResultBlock:
        err.tool_use_id = tool_use.id
        partial_output = err.partial_output
        data: dict[str, Any] = {
            "tool_use_id": tool_use.id,
            "tool_name": tool_use.name,
            "error_class": err.error_class.value,
            "message": bounded_text(err.message, self.max_event_output_bytes)[0],
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "partial_output": partial_output,
        }
        if partial_output:
            # The event carries at most max_event_output_bytes of it; the result keeps all.
            shown, size = bounded_text(partial_output, self.max_event_output_bytes)
            if size is not None:
                data.update(partial_output=shown, truncated=True, output_bytes=size)
        self._publish("tool.failed", data, session_id=session.session_id, turn_id=turn_id)
        text = err.message
        if partial_output:
            text += f"\n\nOutput before it stopped:\n{partial_output}"
        return _error_result(tool_use.id, text)

    # -- cancellation -----------------------------------------------------

    async def cancel_session_tools(self, session_id: str) -> None:
        """Cancel every call of a session: pending confirmations settle as
        'cancelled', running tools get their cancel_event set and ``cancel()``
        called, and a tool still running after the grace period is abandoned."""
        self.broker.cancel_session(session_id)
        calls = list(self._in_flight.get(session_id, ()))
        for call in calls:
            call.cancel_requested = True
        await asyncio.gather(*(self._cancel_call(c) for c in calls if c.tool is not None))

    def in_flight(self, session_id: str) -> int:
        return len(self._in_flight.get(session_id, ()))

    async def _cancel_call(self, call: _Call) -> None:
        assert call.tool is not None and call.context is not None
        call.context.cancel_event.set()
        await _cleanup(call.tool, call.tool_use_id)
        if call.done:
            return
        if call.finished is None:
            call.finished = asyncio.Event()
        try:
            async with asyncio.timeout(self.cancel_grace):
                await call.finished.wait()
        except TimeoutError:
            log.warning(
                "tool call %s ignored cancellation for %.0f s; abandoning it",
                call.tool_use_id,
                self.cancel_grace,
            )
            if call.scope is not None and not call.done:
                call.scope.reschedule(asyncio.get_running_loop().time())


async def _cleanup(tool: Tool, label: str) -> None:
    """Ask a tool to stop what it started, bounded so a stuck tool cannot hang us."""
    try:
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            await tool.cancel()
    except Exception:
        log.warning("cancel() of %s failed or hung", label, exc_info=True)


def _output_text(output: ToolOutput) -> str:
    return "".join(b.text for b in output.content if isinstance(b, TextBlock))


def _error_result(tool_use_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=True)


def _summary(name: str, tool_input: dict[str, Any]) -> str:
    args = json.dumps(tool_input, ensure_ascii=False, default=str, separators=(",", ":"))
    if len(args) > SUMMARY_CHARS:
        args = args[: SUMMARY_CHARS - 1] + "…"
    return f"{name}({args})"
