"""ToolDispatcher: the one road every tool call takes.

``dispatch`` reads top to bottom as the road of one call (a ``ToolCall``, see
dispatcher/call.py for its states and the events each move publishes):
look the tool up (the session's profile and tool filter decide what it may
see), validate the input, check workspace paths, the session's guardrails
(on the effects the tool declares for this input: ``BaseTool.effects``),
its pre_tool_use hooks (which may block or rewrite the input: a rewrite is
validated, scoped and guarded again), let the tool prepare, rate the call
and apply the confirmation policy (settled by the profile), record a
write/execute call instead of running it in a dry-run, wait for a slot under
the session's cap, run a fresh instance under a timeout, validate its
structured output, run post_tool_use hooks, and hand back a canonical
tool_result. Every failure on that road ends as a tool_result with
``is_error: true`` and an event; nothing but the caller's own cancellation
escapes ``dispatch``. The pipeline's stages cost one attribute test each
when the session does not configure them (specs/pipeline.md).

Calls the agent loop answers without running them (malformed arguments, a
turn cancelled before they started) and calls a restart interrupted end
through ``refuse``, ``cancelled_before_start`` and ``interrupted``, so every
``tool.*`` event still comes from ToolCall.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import types
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import Any

from dispatcher.call import CallState, ToolCall, output_text
from dispatcher.confirmations import ConfirmationBroker, ConfirmationRequest, RememberedAnswer
from dispatcher.errors import (
    ConfirmationTimeout,
    ToolCancelled,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolPermissionDenied,
    ToolTimeout,
    ToolUserDenied,
    ToolValidationFailed,
)
from dispatcher.event_output import DEFAULT_MAX_EVENT_OUTPUT_BYTES
from dispatcher.pipeline.dry_run import PlannedAction, is_planned, plan_summary
from dispatcher.pipeline.guardrails import Guardrails, TurnCounter
from dispatcher.pipeline.hooks import (
    HookContext,
    HookEvent,
    HookRunner,
    block_reason,
    format_post_hook_output,
)
from dispatcher.policy import ConfirmMode, PolicyQuery, denies_outright, sandbox_floor
from dispatcher.publisher import EventPublisher, NullPublisher
from dispatcher.registry import RegisteredTool, ToolRegistry
from dispatcher.session import DispatchSession
from dispatcher.tool import (
    CallRating,
    ConfirmationPreview,
    GrantScope,
    Tool,
    ToolContext,
    ToolEffects,
    ToolFactory,
    ToolOutput,
    summarize_input,
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
# Enum members read off their class cost a descriptor call each; these run per call.
_VALIDATED = CallState.VALIDATED
_QUEUED = CallState.QUEUED
_RUNNING = CallState.RUNNING
_AUTO = ConfirmMode.AUTO
_DENY = ConfirmMode.DENY
_GUARDED = CallState.GUARDED
_PRE_HOOKED = CallState.PRE_HOOKED
_OUTPUT_VALIDATED = CallState.OUTPUT_VALIDATED
_POST_HOOKED = CallState.POST_HOOKED
_PRE_TOOL_USE = HookEvent.PRE_TOOL_USE
_POST_TOOL_USE = HookEvent.POST_TOOL_USE
# The classes guardrails look at: what may write files or run commands
# (none and read calls change nothing). The tool declares what such a call
# would touch (BaseTool.effects).
_GUARDED_EFFECTS = frozenset({SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK})
# Shown first in the confirmation of a call whose effects are unknown.
UNKNOWN_EFFECTS_TEXT = "effects unknown: this tool may write any file"
_RESULT_BLOCKS = (TextBlock, ImageBlock)
_COROUTINE = types.CoroutineType
_EXECUTE = SideEffects.EXECUTE
# _execute builds each call's ToolContext by position, in this order.
_CONTEXT_FIELDS = (
    "session_id",
    "turn_id",
    "tool_use_id",
    "workspace_path",
    "workspace_files",
    "cancel_event",
    "logger",
    "options",
    "emit_output",
    "sandbox",
    "prepared",
)
if tuple(f.name for f in dataclasses.fields(ToolContext)) != _CONTEXT_FIELDS:
    raise RuntimeError("ToolContext's fields moved: update _execute and _CONTEXT_FIELDS")


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
        # Where every event of a call goes (dispatcher.call explains how).
        self._publisher: EventPublisher = publisher or NullPublisher()
        self.broker = broker or ConfirmationBroker()
        self.cancel_grace = cancel_grace
        self._in_flight: dict[str, set[ToolCall]] = {}
        self._loggers: dict[str, logging.Logger] = {}

    # -- registry ---------------------------------------------------------

    def register(
        self, factory: ToolFactory, *, group: str | None = None, timeout: float | None = None
    ) -> ToolDefinition:
        """Register a zero-argument factory; raises ToolRegistrationError.
        ``timeout`` overrides the tool's own default (see RegisteredTool.timeout)."""
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
                policy, _policy_query(session, e, None), sandboxed=sandboxed, profile=profile
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
        if len(blocks) == 1:
            return [await self.dispatch(blocks[0], session, turn_id=turn_id, dry_run=dry_run)]
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
        # Look-up.
        entry = self._registry.get(tool_use.name)
        if entry is None or not self._visible(entry, session):
            err = ToolNotFound(f"no tool named {tool_use.name!r} is available in this session")
            return call.fail(err)
        call.entry = entry
        # Validation: the later stages take only a validated call.
        if not call.validate():
            assert call.result is not None
            return call.result
        calls = self._in_flight.get(session.session_id)
        if calls is None:  # not setdefault: it would build a set on every call
            calls = self._in_flight[session.session_id] = set()
        calls.add(call)
        try:
            output = await self._run(call, session, dry_run or session.dry_run)
        except ToolError as err:
            return call.fail(err)
        except asyncio.CancelledError:
            # The caller (the turn) was cancelled: still tell every client.
            call.fail(ToolCancelled("the call was cancelled before it finished"))
            raise
        except Exception:
            # A bug in a stage or in the dispatcher itself; still an error result.
            log.exception("dispatch of %s (%s) failed", tool_use.name, tool_use.id)
            internal = ToolExecutionError(
                f"{tool_use.name} failed with an internal error; details are in the server log",
                is_user_visible=False,
            )
            return call.fail(internal)
        finally:
            # The context's emit_output points back at the call: drop the cycle
            # so the call is freed at once, not by the cyclic GC.
            call.tool = call.context = call.timeout_scope = None
            if call.finished is not None:
                call.finished.set()
            calls.discard(call)
            if not calls:
                self._in_flight.pop(session.session_id, None)
        if output is None:
            # Ended on the road (planned in a dry-run, an invalid rewrite).
            assert call.result is not None
            return call.result
        result = call.complete(output)
        if on_output is not None and not result.is_error:
            on_output(output)
        return result

    async def _run(
        self, call: ToolCall, session: DispatchSession, dry_run: bool
    ) -> ToolOutput | None:
        """The stages after validation, in order; each raises a ToolError to end
        the call. None: the call ended on the way (``call.result`` holds it)."""
        assert call.state is _VALIDATED and call.entry is not None
        entry = call.entry
        side_effects = entry.definition.side_effects
        # Workspace scope: every path argument must stay inside the workspace.
        self._check_scope(call, session)
        # Guardrails: deterministic rules, before any hook or person sees the call.
        guardrails = session.guardrails
        if guardrails is not None and not guardrails.checks_calls:
            guardrails = None  # quality gates only: nothing to check per call
        if guardrails is not None and side_effects in _GUARDED_EFFECTS:
            await self._guard(call, session, guardrails)
        # pre_tool_use hooks: may block, or rewrite the input.
        hooks = session.hooks
        if hooks is not None and (dry_run or session.dry_run):
            hooks = hooks.read_only_view()  # a dry-run changes nothing, hooks included
        if (
            hooks is not None
            and hooks.has_hooks(_PRE_TOOL_USE)
            and not await self._pre_hooks(call, session, hooks)
        ):
            return None
        # The tool's per-call preparation, shared by every later stage (the
        # guardrails may have made it already, for the call's effects).
        if entry.prepares and call.prepared is None:
            call.prepared = self._prepare(call, session)
        # Confirmation: rate the call, ask the policy, ask a person if need be.
        if entry.rates:
            call.rating = self._rate(call, session)
        policy = session.policy
        mode = policy.mode_for(_policy_query(session, entry, call.rating))
        # The one place where "auto-approval is a privilege of the sandbox" holds:
        # outside a sandbox an execute-class call always asks (yolo aside).
        # (sandbox_floor returns any other call's mode as it is: not called.)
        if side_effects is _EXECUTE and session.sandbox is None:
            mode = sandbox_floor(mode, side_effects, sandboxed=False, policy=policy)
        if call.effects_ask is not None and mode is not _DENY:
            # Effects the guardrails cannot check: a person decides, every time.
            mode = ConfirmMode.PROMPT
        if mode is _DENY:
            raise ToolPermissionDenied(
                f"the confirmation policy denies {entry.name!r} in this session"
            )
        profile = session.profile
        if profile is not None and profile.settle(mode) is _DENY:
            # Applied last: a non-interactive profile has nobody to ask.
            raise ToolPermissionDenied(
                f"{entry.name!r} would need a confirmation, and the profile "
                f"{profile.name!r} is non-interactive: refused"
            )
        # Dry-run: a call that would change something is recorded, not run. The
        # policy above still refuses what it denies, but nobody is asked about a
        # call that will not run: the plan says it would ask.
        if dry_run and is_planned(side_effects):
            action = PlannedAction(
                tool_use_id=call.tool_use.id,
                tool_name=entry.name,
                summary=plan_summary(await self._effects(call, session)),
                input=call.input,
                needs_confirmation=mode is not _AUTO,
            )
            session.planned.setdefault(call.turn_id, []).append(action)
            call.plan(action)
            return None
        if mode is not _AUTO:
            await self._confirm(call, session, mode)
        # Queue: wait for one of the session's slots.
        if call.cancel_requested:
            raise ToolCancelled("the call was cancelled before it started")
        call.state = _QUEUED
        # What ``async with`` does, without its __aenter__/__aexit__ coroutines
        # (~0.4 us a call): acquire outside the try, release in its finally.
        slots = session.semaphore
        await slots.acquire()
        try:
            if call.cancel_requested:
                raise ToolCancelled("the call was cancelled before it started")
            # Run: announce, then a fresh instance under the timeout.
            call.state = _RUNNING
            output = await self._execute(call, session)
        finally:
            slots.release()
        # Output validation: structured data against the declared output_schema.
        if entry.output_validator is not None and output.data is not None:
            self._check_output(call, output)
        if guardrails is not None and output.files_modified:
            # What the call reported changing (a shell's files) counts for the turn.
            counter = session.turn_counters.get(call.turn_id)
            if counter is not None:
                counter.record(output.files_modified)
        # post_tool_use hooks: their report is appended to the result.
        if hooks is not None and output.success and hooks.has_hooks(_POST_TOOL_USE):
            await self._post_hooks(call, session, hooks, output)
        return output

    # -- the pipeline's stages ---------------------------------------------

    @staticmethod
    def _check_scope(call: ToolCall, session: DispatchSession) -> None:
        assert call.entry is not None
        tool_input = call.input
        for name in call.entry.path_fields:
            value = tool_input.get(name)
            if isinstance(value, str):
                session.workspace.resolve(value)

    async def _guard(
        self, call: ToolCall, session: DispatchSession, guardrails: Guardrails
    ) -> None:
        """Guardrails on the call's declared effects: refuse (``blocked_by`` a
        rule), pass with warnings, or pass on condition that a person is asked
        (effects unknown)."""
        assert call.entry is not None
        entry = call.entry
        if entry.prepares and call.prepared is None:
            # Made once here and shared with the later stages (the shell's
            # analysis of its command gives its effects too).
            call.prepared = self._prepare(call, session)
        effects = await self._effects(call, session)
        counter = None
        if guardrails.config.max_files_modified is not None:
            counter = session.turn_counters.get(call.turn_id)
            if counter is None:
                counter = session.turn_counters[call.turn_id] = TurnCounter()
        # Synchronous from the check to the count: concurrent calls of one
        # turn cannot together pass max_files_modified.
        verdict = guardrails.check(effects, counter, tool_name=entry.name)
        if verdict.warnings:
            call.warn(verdict.warnings)
        if verdict.blocked_by is not None:
            call.blocked_by = verdict.blocked_by_data()
            raise ToolPermissionDenied(
                f"Blocked by guardrail {verdict.blocked_by}: {verdict.message}"
            )
        call.effects_ask = verdict.ask
        call.state = _GUARDED

    async def _effects(self, call: ToolCall, session: DispatchSession) -> ToolEffects:
        """The call's declared effects, derived once per input. A tool that
        fails to derive them (a bug) has unknown effects; a ToolError refuses
        the call, as from ``rate``."""
        if call.effects is not None:
            return call.effects
        assert call.entry is not None
        entry = call.entry
        try:
            effects = await entry.stateless.effects(
                call.input, session.workspace, sandbox=session.sandbox, prepared=call.prepared
            )
        except ToolError:
            raise
        except Exception:
            log.exception("effects of %s failed; treating them as unknown", entry.name)
            effects = ToolEffects.not_known(summarize_input(entry.name, call.input))
        call.effects = effects
        return effects

    async def _pre_hooks(self, call: ToolCall, session: DispatchSession, hooks: HookRunner) -> bool:
        """pre_tool_use hooks. False: the call ended here (an invalid rewrite)."""
        assert call.entry is not None
        context = self._hook_context(call, session, self._input_file(call, session))
        results = await hooks.run(_PRE_TOOL_USE, context, sandbox=session.sandbox)
        blocked = block_reason(results)
        if blocked is not None:
            call.blocked_by = blocked.blocked_by_data()
            raise ToolPermissionDenied(f"Blocked by hook {blocked.name}: {blocked.reason}")
        rewritten_by: str | None = None
        new_input = call.input
        for result in results:
            if result.decision == "error":
                log.warning(
                    "pre_tool_use hook %s failed (%s); the call goes on",
                    result.name,
                    result.reason,
                )
            if result.additional_context:
                call.note(f"[Hook {result.name}]: {result.additional_context}")
            if result.updated_input is not None:
                rewritten_by, new_input = result.name, result.updated_input
        call.state = _PRE_HOOKED
        if rewritten_by is None:
            return True
        # The new input goes through validation, scope and guardrails again.
        call.rewrite(new_input)
        if not call.validate(rewritten_by=rewritten_by):
            return False
        self._check_scope(call, session)
        side_effects = call.entry.definition.side_effects
        guardrails = session.guardrails
        if guardrails is not None and guardrails.checks_calls and side_effects in _GUARDED_EFFECTS:
            await self._guard(call, session, guardrails)
        return True

    def _check_output(self, call: ToolCall, output: ToolOutput) -> None:
        """Structured output against the output_schema; a mismatch is a bug in
        the tool: logged as one, and the call fails as ``execution_error``."""
        assert call.entry is not None and call.entry.output_validator is not None
        entry, data = call.entry, output.data
        validator = call.entry.output_validator
        if validator.is_valid(data):
            call.state = _OUTPUT_VALIDATED
            return
        errors = validator.errors(data)
        log.error(
            "tool %s returned structured output that does not match its output_schema "
            "(a bug in the tool): %s",
            entry.name,
            "; ".join(str(e) for e in errors),
        )
        first = errors[0]
        raise ToolExecutionError(
            f"{entry.name} returned structured output that does not match its "
            f"output_schema at '{first.path}': {first.message}"
        )

    async def _post_hooks(
        self, call: ToolCall, session: DispatchSession, hooks: HookRunner, output: ToolOutput
    ) -> None:
        """post_tool_use hooks, once per file the call modified."""
        files = list(output.files_modified or ())
        context = self._hook_context(call, session, files[0] if files else None)
        results = await hooks.run_per_file(_POST_TOOL_USE, context, files, sandbox=session.sandbox)
        report = format_post_hook_output(results)
        if report:
            call.note(report)
        call.state = _POST_HOOKED

    @staticmethod
    def _hook_context(call: ToolCall, session: DispatchSession, file: str | None) -> HookContext:
        return HookContext(
            session_id=session.session_id,
            workspace=session.workspace.workspace_root,
            tool_name=call.tool_use.name,
            tool_input=call.input,
            file=file,
            tool_use_id=call.tool_use.id,
            turn_id=call.turn_id,
        )

    @staticmethod
    def _input_file(call: ToolCall, session: DispatchSession) -> str | None:
        """The workspace-relative file a call names (its first path field), for
        a pre-hook's ``{file}`` and ``file_patterns``."""
        assert call.entry is not None
        workspace = session.workspace
        for name in call.entry.path_fields:
            value = call.input.get(name)
            if isinstance(value, str):
                return workspace.relative(workspace.resolve(value))
        return None

    def _receive(self, tool_use: ToolUseBlock, session: DispatchSession, turn_id: str) -> ToolCall:
        return ToolCall(
            tool_use,
            session.session_id,
            turn_id,
            self._publisher,
            self.max_event_output_bytes,
            session,
        )

    # -- stages -------------------------------------------------------------

    def _prepare(self, call: ToolCall, session: DispatchSession) -> Any:
        assert call.entry is not None
        try:
            return call.entry.stateless.prepare(call.input, session.workspace)
        except ToolError:
            raise  # the tool refuses this call outright
        except Exception:
            # Each later stage prepares for itself again (and handles its failure).
            log.exception("prepare of %s failed", call.entry.name)
            return None

    def _rate(self, call: ToolCall, session: DispatchSession) -> CallRating | None:
        assert call.entry is not None
        try:
            return call.entry.stateless.rate(call.input, session.workspace, prepared=call.prepared)
        except ToolError:
            raise  # the tool refuses this call outright (a blocklisted command)
        except Exception:
            # A rating that cannot be computed must not lower the bar.
            log.exception("rating %s failed; treating the call as dangerous", call.entry.name)
            return CallRating.DANGEROUS

    async def _confirm(self, call: ToolCall, session: DispatchSession, mode: ConfirmMode) -> None:
        assert call.entry is not None
        entry, tool_use = call.entry, call.tool_use
        scope = self._scope(call, session)
        answers = [session.remembered.get((entry.name, key)) for key, _ in scope.parts]
        if any(a is not None and a.decision == "deny" for a in answers):
            raise ToolUserDenied(f"the user denied {entry.name!r} for the rest of this session")
        # Covered only when every part has a grant at its rating or higher;
        # never a call whose effects the guardrails could not check.
        if call.effects_ask is None and all(
            a is not None and a.allows(part_rating)
            for a, (_, part_rating) in zip(answers, scope.parts, strict=True)
        ):
            return
        if call.effects_ask is not None:
            scope = GrantScope(
                scope.parts,
                f"{scope.text} (this call's effects are unknown: while guardrails are "
                "set, each such call is asked again)",
            )
        preview = await self._preview(call, session)
        call.request = request = ConfirmationRequest(
            request_id=self.broker.new_request_id(),
            session_id=session.session_id,
            turn_id=call.turn_id,
            tool_use_id=tool_use.id,
            tool_name=entry.name,
            side_effects=entry.definition.side_effects,
            rating=call.rating,
            input_summary=_summary(entry.name, tool_use.input),
            projected_modifications=preview.projected_modifications,
            preview_kind=preview.kind,
            # Cut only past what must be seen whole (a shell's command and env).
            preview_text=preview.text[: max(PREVIEW_CHARS, preview.keep)],
            expires_at=self.broker.expiry(session.confirmation_timeout),
            scope_text=scope.text,
        )
        call.state = CallState.AWAITING_CONFIRMATION
        resolution = await self.broker.ask(request, answer_within=session.confirmation_timeout)
        # Published with the call's next move (queued, failed or cancelled).
        call.resolution = resolution
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

    def _scope(self, call: ToolCall, session: DispatchSession) -> GrantScope:
        assert call.entry is not None
        entry = call.entry
        try:
            return entry.stateless.scope(call.input, session.workspace, prepared=call.prepared)
        except Exception:
            # A scope that cannot be computed grants only this exact call's input.
            log.exception("scope of %s failed; granting nothing wider than the call", entry.name)
            exact = json.dumps(call.input, sort_keys=True, default=str)
            return GrantScope(((f"= {exact}", None),), f"allow this exact {entry.name} call")

    async def _preview(self, call: ToolCall, session: DispatchSession) -> ConfirmationPreview:
        """The tool's preview, listing the files the call's declared effects
        modify (and saying so first when they are unknown)."""
        assert call.entry is not None
        entry, tool_input = call.entry, call.input
        effects = await self._effects(call, session)
        try:
            preview = await entry.stateless.preview(
                tool_input, session.workspace, sandbox=session.sandbox, prepared=call.prepared
            )
        except ToolError as err:
            preview = ConfirmationPreview(text=f"(no preview: {err.message})")
        except Exception:
            log.exception("preview of %s failed", entry.name)
            preview = ConfirmationPreview(text="(no preview: it failed; see the server log)")
        if preview is None:
            text = json.dumps(tool_input, indent=2, ensure_ascii=False, default=str)
            preview = ConfirmationPreview(text=text)
        if not effects.unknown:
            return dataclasses.replace(preview, projected_modifications=effects.modified)
        head = f"{UNKNOWN_EFFECTS_TEXT}\n"
        return ConfirmationPreview(
            text=head + preview.text,
            kind=preview.kind,
            projected_modifications=effects.modified,
            keep=len(head) + preview.keep,
        )

    async def _execute(self, call: ToolCall, session: DispatchSession) -> ToolOutput:
        assert call.entry is not None
        entry = call.entry
        tool = entry.factory()
        workspace = session.workspace
        # Positional, in _CONTEXT_FIELDS' order (checked at import): eleven
        # keywords cost ~0.35 us more per call than the same call by position.
        context = ToolContext(
            session.session_id,
            call.turn_id,
            call.tool_use.id,
            workspace.workspace_root,
            workspace,
            asyncio.Event(),
            self._loggers[entry.name],
            session.tool_options.get(entry.options_section, _EMPTY),
            call.emit_output,
            session.sandbox,
            call.prepared,
        )
        call.tool, call.context = tool, context
        try:
            # The timeout can only fire at a suspension, so it is armed at the
            # first one: a tool that returns without ever suspending cannot be
            # interrupted either way, and skips its timer handle (~4 us of a
            # no-op call: scheduling, cancelling, purging it from the heap).
            # The deadline still counts from tool.called (``started``), so it
            # is never later than a timeout entered before the first step.
            steps = tool.execute(call.tool_use.input, context)
            if steps.__class__ is not _COROUTINE:
                # Some other awaitable (a plugin's own): awaited whole, as ever.
                async with asyncio.timeout(entry.timeout) as scope:
                    call.timeout_scope = scope
                    output = await steps
            else:
                try:
                    suspended_on = steps.send(None)
                except StopIteration as returned:
                    output = returned.value
                else:
                    assert call.started is not None
                    left = entry.timeout - (time.perf_counter() - call.started)
                    async with asyncio.timeout(left) as scope:
                        call.timeout_scope = scope
                        output = await _Resumed(steps, suspended_on)
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
        if not _is_tool_output(output):
            raise ToolExecutionError(
                f"{entry.name} returned {type(output).__name__} that is not a ToolOutput of "
                "text and image blocks",
                is_user_visible=False,
            )
        if call.cancel_requested:
            raise ToolCancelled(f"{entry.name} was cancelled", partial_output=output_text(output))
        return output

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
        call.timed = False
        call.fail(ToolCancelled("the turn was cancelled before the call started"))
        # Unlike a call cancelled in the dispatcher, this one never reached a tool.
        text = "Cancelled: the turn was cancelled before the call started."
        call.result = ToolResultBlock(
            tool_use_id=block.id, content=[TextBlock(text=text)], is_error=True
        )
        return call.result

    def interrupted(
        self, block: ToolUseBlock, session_id: str, *, turn_id: str, reason: str
    ) -> ToolResultBlock:
        """Answer a call whose dispatch never finished (the server stopped):
        ``tool.failed`` with ``error_class: cancelled``, no duration, and the
        result ``Interrupted: <reason>.``. Needs no live DispatchSession, so
        recovery after a restart can use it."""
        call = ToolCall(block, session_id, turn_id, self._publisher, self.max_event_output_bytes)
        call.timed = False
        call.fail(ToolCancelled(reason))
        text = f"Interrupted: {reason}."
        call.result = ToolResultBlock(
            tool_use_id=block.id, content=[TextBlock(text=text)], is_error=True
        )
        return call.result

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

    async def _cancel_call(self, call: ToolCall) -> None:
        tool, context = call.tool, call.context
        if tool is None or context is None:
            return  # it ended meanwhile
        context.cancel_event.set()
        await _cleanup(tool, call.tool_use.id)
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
            scope = call.timeout_scope
            if scope is not None and not call.done:
                scope.reschedule(asyncio.get_running_loop().time())


def _policy_query(
    session: DispatchSession, entry: RegisteredTool, rating: CallRating | None
) -> PolicyQuery:
    """The policy's question for one call. An unrated call's is the same each
    time (tool, class, workspace), so the session keeps one per tool: a frozen
    dataclass costs ~0.5 us to build. A kept query is used only while its
    class and workspace are the tool's and the session's (a tool registered
    again under the same name with other side effects gets a new one)."""
    root = session.workspace.workspace_root
    side_effects = entry.definition.side_effects
    if rating is not None:
        return PolicyQuery(entry.name, side_effects, rating, root)
    kept = session.policy_queries.get(entry.name)
    if kept is None or kept.side_effects is not side_effects or kept.workspace is not root:
        kept = session.policy_queries[entry.name] = PolicyQuery(
            entry.name, side_effects, None, root
        )
    return kept


class _Resumed:
    """``await`` on a coroutine already stepped once, from the point where it
    suspended (``await steps`` cannot: it would resume it with None in place
    of handing the task the future it suspended on). Hands that future over,
    forwards what comes back, and once the task resumes it plainly (asyncio
    sends None) delegates the rest to ``yield from``, as ``await`` would."""

    __slots__ = ("_steps", "_suspended_on")

    def __init__(self, steps: Coroutine[Any, Any, Any], suspended_on: Any) -> None:
        self._steps = steps
        self._suspended_on = suspended_on

    def __await__(self) -> Generator[Any, Any, Any]:
        steps, pending = self._steps, self._suspended_on
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # CancelledError included: the tool sees it
                try:
                    pending = steps.throw(exc)
                except StopIteration as returned:
                    return returned.value
                continue
            if sent is None:
                return (yield from steps.__await__())
            try:
                pending = steps.send(sent)
            except StopIteration as returned:
                return returned.value


def _is_tool_output(output: object) -> bool:
    """A ToolOutput of text and image blocks; a plain loop over a tuple of
    types (a generator under ``all`` and a union ``isinstance`` cost ~1 us)."""
    if not isinstance(output, ToolOutput):
        return False
    for block in output.content:  # noqa: SIM110 - a generator under all() is the cost avoided
        if not isinstance(block, _RESULT_BLOCKS):
            return False
    return True


async def _cleanup(tool: Tool, label: str) -> None:
    """Ask a tool to stop what it started, bounded so a stuck tool cannot hang us."""
    try:
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            await tool.cancel()
    except Exception:
        log.warning("cancel() of %s failed or hung", label, exc_info=True)


def _summary(name: str, tool_input: dict[str, Any]) -> str:
    args = json.dumps(tool_input, ensure_ascii=False, default=str, separators=(",", ":"))
    if len(args) > SUMMARY_CHARS:
        args = args[: SUMMARY_CHARS - 1] + "…"
    return f"{name}({args})"
