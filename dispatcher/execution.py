"""The execution stage: a slot, a fresh instance, a timeout, and cancellation.

``Execution.run`` waits for one of the session's slots (``queued``), then
announces the call (``running``: ``tool.called``) and awaits a fresh
instance's ``execute`` under the tool's timeout (armed at its first
suspension: dispatcher/lazy_timeout.py). Whatever the tool does
wrong becomes a ``ToolError``: a timeout (its ``cancel()`` asked to clean
up), an exception (logged; the model sees one redacted line), a return
value that is not a ``ToolOutput`` of text and image blocks. A call whose
session is being cancelled ends ``cancelled`` whatever it returned.

``Execution.cancel`` is the other side: it sets the running tool's
``cancel_event``, calls its ``cancel()`` (bounded by CLEANUP_TIMEOUT), and
a tool that still runs after the grace period is abandoned by firing its
timeout at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from dispatcher.call import CallState, Running, ToolCall, output_text
from dispatcher.errors import ToolCancelled, ToolError, ToolExecutionError, ToolTimeout
from dispatcher.lazy_timeout import run_under
from dispatcher.stages import ValidatedCall
from dispatcher.tool import Tool, ToolContext, ToolOutput
from protocol.canonical import ImageBlock, TextBlock

log = logging.getLogger("toolrelay.dispatcher")

DEFAULT_CANCEL_GRACE = 30.0  # how long a cancelled tool may take before it is abandoned
CLEANUP_TIMEOUT = 5.0  # bound on a tool's own cancel() during cleanup
_EMPTY: Mapping[str, Any] = {}
NOT_STARTED = "the call was cancelled before it started"


class Execution:
    """Runs validated, confirmed calls; see the module docstring."""

    def __init__(self, cancel_grace: float = DEFAULT_CANCEL_GRACE) -> None:
        self.cancel_grace = cancel_grace
        self._loggers: dict[str, logging.Logger] = {}

    def logger(self, tool_name: str) -> logging.Logger:
        """The logger a tool's context carries (``toolrelay.tools.<name>``)."""
        found = self._loggers.get(tool_name)
        if found is None:
            found = self._loggers[tool_name] = logging.getLogger(f"toolrelay.tools.{tool_name}")
        return found

    async def run(self, v: ValidatedCall) -> ToolOutput:
        """Queue for a slot, then run the tool."""
        call = v.call
        if call.cancel_requested:
            raise ToolCancelled(NOT_STARTED)
        call.state = CallState.QUEUED
        # ``async with`` spelled out (acquire, then release in a finally): its
        # __aenter__/__aexit__ coroutines are a measurable share of a no-op
        # call in benchmarks/dispatch_overhead.py.
        slots = v.session.semaphore
        await slots.acquire()
        try:
            if call.cancel_requested:
                raise ToolCancelled(NOT_STARTED)
            call.state = CallState.RUNNING
            return await self._execute(v)
        finally:
            slots.release()

    async def _execute(self, v: ValidatedCall) -> ToolOutput:
        call, entry = v.call, v.entry
        tool = entry.factory()
        context = self._context(v)
        call.running = running = Running(tool, context)
        try:
            assert call.timing.started is not None
            output = await run_under(
                tool.execute(v.input, context),
                entry.timeout,
                call.timing.started,
                running.arm,
            )
        except TimeoutError:
            if call.cancel_requested:
                raise ToolCancelled(
                    f"{entry.name} ignored cancellation for {self.cancel_grace:g} s and "
                    "was abandoned"
                ) from None
            await cleanup(tool, entry.name)
            raise ToolTimeout(f"{entry.name} timed out after {entry.timeout:g} s") from None
        except ToolError as err:
            if call.cancel_requested and not isinstance(err, ToolCancelled):
                raise ToolCancelled(f"{entry.name} was cancelled: {err.message}") from err
            raise
        except asyncio.CancelledError:
            await cleanup(tool, entry.name)
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
        return _checked(call, entry.name, output)

    def _context(self, v: ValidatedCall) -> ToolContext:
        call, entry, session = v.call, v.entry, v.session
        return ToolContext(
            session_id=session.session_id,
            turn_id=call.turn_id,
            tool_use_id=call.tool_use.id,
            workspace_path=session.workspace.workspace_root,
            workspace_files=session.workspace,
            cancel_event=asyncio.Event(),
            logger=self.logger(entry.name),
            options=session.tool_options.get(entry.options_section, _EMPTY),
            emit_output=call.emit_output,
            sandbox=session.sandbox,
            prepared=call.derived.prepared,
        )

    async def cancel(self, call: ToolCall) -> None:
        """Stop one running call (module docstring)."""
        running = call.running
        if running is None:
            return  # it ended meanwhile
        running.context.cancel_event.set()
        await cleanup(running.tool, call.tool_use.id)
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
                call.tool_use.id,
                self.cancel_grace,
            )
            scope = running.timeout_scope
            if scope is not None and not call.done:
                scope.reschedule(asyncio.get_running_loop().time())


def _checked(call: ToolCall, name: str, output: object) -> ToolOutput:
    """The tool's output, if it is a ToolOutput of text and image blocks."""
    if not isinstance(output, ToolOutput) or not _blocks_ok(output):
        raise ToolExecutionError(
            f"{name} returned {type(output).__name__} that is not a ToolOutput of "
            "text and image blocks",
            is_user_visible=False,
        )
    if call.cancel_requested:
        raise ToolCancelled(f"{name} was cancelled", partial_output=output_text(output))
    return output


def _blocks_ok(output: ToolOutput) -> bool:
    for block in output.content:  # noqa: SIM110 - reads as plainly as all() over a generator
        if not isinstance(block, TextBlock | ImageBlock):
            return False
    return True


async def cleanup(tool: Tool, label: str) -> None:
    """Ask a tool to stop what it started, bounded so a stuck tool cannot hang us."""
    try:
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            await tool.cancel()
    except Exception:
        log.warning("cancel() of %s failed or hung", label, exc_info=True)
