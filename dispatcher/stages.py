"""The stages of a call's road after validation, each a small function.

``ToolDispatcher._run`` (dispatcher/dispatcher.py) calls them in the order of
specs/pipeline.md; confirmation and execution have their own modules
(dispatcher/confirmation_stage.py, dispatcher/execution.py). A stage takes
the ``ValidatedCall`` it works on and either returns (the call goes on),
raises a ``ToolError`` (the call ends with it), or, for the few that can end
a call without an error (a plan, an invalid rewrite), says so. A stage the
session does not configure returns at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from dispatcher.call import CallState, ToolCall
from dispatcher.errors import ToolError, ToolExecutionError, ToolPermissionDenied
from dispatcher.pipeline.dry_run import PlannedAction, is_planned, plan_summary
from dispatcher.pipeline.guardrails import Guardrails, TurnCounter
from dispatcher.pipeline.hooks import (
    HookContext,
    HookEvent,
    HookRunner,
    block_reason,
    format_post_hook_output,
)
from dispatcher.policy import ConfirmMode
from dispatcher.registry import RegisteredTool
from dispatcher.schema_subset import CompiledValidator
from dispatcher.session import DispatchSession
from dispatcher.tool import CallRating, ToolEffects, ToolOutput, summarize_input
from protocol.canonical import SideEffects

log = logging.getLogger("toolrelay.dispatcher")

# The classes guardrails look at: what may write files or run commands
# (none and read calls change nothing). The tool declares what such a call
# would touch (BaseTool.effects).
GUARDED_EFFECTS = frozenset({SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK})


@dataclass(slots=True)
class ValidatedCall:
    """A call whose input matched its tool's schema: what every later stage takes.

    ``call`` is the state machine; ``input`` the input that passed (a hook
    that rewrites it gives a new ValidatedCall, see ``pre_hooks``);
    ``entry`` the registered tool; ``session`` the dispatch session;
    ``guardrails`` the session's rules when they check calls of this tool's
    class (else None); ``hooks`` the session's hooks (read-only in a
    dry-run), None when there are none; ``dry_run`` whether the call is
    recorded instead of run.
    """

    call: ToolCall
    input: dict[str, Any]
    entry: RegisteredTool
    session: DispatchSession
    guardrails: Guardrails | None
    hooks: HookRunner | None
    dry_run: bool

    @classmethod
    def of(
        cls, call: ToolCall, entry: RegisteredTool, session: DispatchSession, dry_run: bool
    ) -> ValidatedCall:
        guardrails = session.guardrails
        if guardrails is not None and not (
            guardrails.checks_calls and entry.definition.side_effects in GUARDED_EFFECTS
        ):
            guardrails = None  # quality gates only, or a class they do not look at
        hooks = session.hooks
        if hooks is not None and dry_run:
            hooks = hooks.read_only_view()  # a dry-run changes nothing, hooks included
        return cls(call, call.tool_use.input, entry, session, guardrails, hooks, dry_run)

    @property
    def name(self) -> str:
        return self.entry.name


# -- before the tool runs ------------------------------------------------------------


def check_scope(v: ValidatedCall) -> None:
    """Workspace scope: every path argument must stay inside the workspace."""
    tool_input = v.input
    for name in v.entry.path_fields:
        value = tool_input.get(name)
        if isinstance(value, str):
            v.session.workspace.resolve(value)


async def guard(v: ValidatedCall, guardrails: Guardrails) -> None:
    """Guardrails on the call's declared effects: refuse (``blocked_by`` a
    rule), pass with warnings, or pass on condition that a person is asked
    (effects unknown)."""
    call = v.call
    # Made once here and shared with the later stages (the shell's analysis
    # of its command gives its effects too).
    prepare(v)
    effects = await effects_of(v)
    counter = None
    if guardrails.config.max_files_modified is not None:
        counter = v.session.turn_counters.setdefault(call.turn_id, TurnCounter())
    # Synchronous from the check to the count: concurrent calls of one turn
    # cannot together pass max_files_modified.
    verdict = guardrails.check(effects, counter, tool_name=v.name)
    if verdict.warnings:
        call.warn(verdict.warnings)
    if verdict.blocked_by is not None:
        call.outcome.blocked_by = verdict.blocked_by_data()
        raise ToolPermissionDenied(f"Blocked by guardrail {verdict.blocked_by}: {verdict.message}")
    call.derived.effects_ask = verdict.ask
    call.state = CallState.GUARDED


async def pre_hooks(v: ValidatedCall, hooks: HookRunner) -> ValidatedCall | None:
    """pre_tool_use hooks: may block, add context, or rewrite the input (then
    validated, scoped and guarded again: the call goes on as the
    ValidatedCall returned). None: the call ended here (an invalid rewrite)."""
    if not hooks.has_hooks(HookEvent.PRE_TOOL_USE):
        return v
    call = v.call
    context = hook_context(v, input_file(v))
    results = await hooks.run(HookEvent.PRE_TOOL_USE, context, sandbox=v.session.sandbox)
    blocked = block_reason(results)
    if blocked is not None:
        call.outcome.blocked_by = blocked.blocked_by_data()
        raise ToolPermissionDenied(f"Blocked by hook {blocked.name}: {blocked.reason}")
    rewritten_by: str | None = None
    new_input = call.input
    for result in results:
        if result.decision == "error":
            log.warning(
                "pre_tool_use hook %s failed (%s); the call goes on", result.name, result.reason
            )
        if result.additional_context:
            call.note(f"[Hook {result.name}]: {result.additional_context}")
        if result.updated_input is not None:
            rewritten_by, new_input = result.name, result.updated_input
    call.state = CallState.PRE_HOOKED
    if rewritten_by is None:
        return v
    call.rewrite(new_input)
    if not call.validate(rewritten_by=rewritten_by):
        return None
    v = replace(v, input=call.input)
    check_scope(v)
    if v.guardrails is not None:
        await guard(v, v.guardrails)
    return v


def prepare(v: ValidatedCall) -> None:
    """The tool's per-call preparation, made once and shared by every later stage."""
    derived = v.call.derived
    if derived.prepared is not None or not v.entry.prepares:
        return
    try:
        derived.prepared = v.entry.stateless.prepare(v.input, v.session.workspace)
    except ToolError:
        raise  # the tool refuses this call outright
    except Exception:
        # Each later stage prepares for itself again (and handles its failure).
        log.exception("prepare of %s failed", v.name)


def rate(v: ValidatedCall) -> None:
    """The call's rating (safe, dev, dangerous) for the confirmation policy."""
    if not v.entry.rates:
        return  # None: judged by the declared side effects
    derived = v.call.derived
    try:
        derived.rating = v.entry.stateless.rate(
            v.input, v.session.workspace, prepared=derived.prepared
        )
    except ToolError:
        raise  # the tool refuses this call outright (a blocklisted command)
    except Exception:
        # A rating that cannot be computed must not lower the bar.
        log.exception("rating %s failed; treating the call as dangerous", v.name)
        derived.rating = CallRating.DANGEROUS


async def effects_of(v: ValidatedCall) -> ToolEffects:
    """The call's declared effects, derived once per input. A tool that fails
    to derive them (a bug) has unknown effects; a ToolError refuses the call,
    as from ``rate``."""
    derived = v.call.derived
    if derived.effects is not None:
        return derived.effects
    session = v.session
    try:
        effects = await v.entry.stateless.effects(
            v.input, session.workspace, sandbox=session.sandbox, prepared=derived.prepared
        )
    except ToolError:
        raise
    except Exception:
        log.exception("effects of %s failed; treating them as unknown", v.name)
        effects = ToolEffects.not_known(summarize_input(v.name, v.input))
    derived.effects = effects
    return effects


async def record_plan(v: ValidatedCall, mode: ConfirmMode) -> bool:
    """Dry-run: a call that would change something is recorded, not run (True).
    The policy has already refused what it denies, but nobody is asked about
    a call that will not run: the plan says whether it would ask."""
    if not is_planned(v.entry.definition.side_effects):
        return False
    call = v.call
    action = PlannedAction(
        tool_use_id=call.tool_use.id,
        tool_name=v.name,
        summary=plan_summary(await effects_of(v)),
        input=call.input,
        needs_confirmation=mode is not ConfirmMode.AUTO,
    )
    v.session.planned.setdefault(call.turn_id, []).append(action)
    call.plan(action)
    return True


# -- after the tool ran ----------------------------------------------------------------


def check_output(v: ValidatedCall, validator: CompiledValidator, output: ToolOutput) -> None:
    """Structured output against the tool's output_schema; a mismatch is a
    bug in the tool: logged as one, and the call fails as ``execution_error``."""
    data = output.data
    if data is None:
        return  # no structured output: nothing to check
    if validator.is_valid(data):
        v.call.state = CallState.OUTPUT_VALIDATED
        return
    errors = validator.errors(data)
    log.error(
        "tool %s returned structured output that does not match its output_schema "
        "(a bug in the tool): %s",
        v.name,
        "; ".join(str(e) for e in errors),
    )
    first = errors[0]
    raise ToolExecutionError(
        f"{v.name} returned structured output that does not match its "
        f"output_schema at '{first.path}': {first.message}"
    )


def count_files(v: ValidatedCall, output: ToolOutput) -> None:
    """What the call reported changing (a shell's files) counts for the turn's
    ``max_files_modified`` (guardrails set)."""
    if not output.files_modified:
        return
    counter = v.session.turn_counters.get(v.call.turn_id)
    if counter is not None:
        counter.record(output.files_modified)


async def post_hooks(v: ValidatedCall, hooks: HookRunner, output: ToolOutput) -> None:
    """post_tool_use hooks, once per file the call modified; their report is
    appended to the result."""
    if not output.success or not hooks.has_hooks(HookEvent.POST_TOOL_USE):
        return
    files = list(output.files_modified or ())
    context = hook_context(v, files[0] if files else None)
    results = await hooks.run_per_file(
        HookEvent.POST_TOOL_USE, context, files, sandbox=v.session.sandbox
    )
    report = format_post_hook_output(results)
    if report:
        v.call.note(report)
    v.call.state = CallState.POST_HOOKED


# -- parts -------------------------------------------------------------------------------


def hook_context(v: ValidatedCall, file: str | None) -> HookContext:
    call, session = v.call, v.session
    return HookContext(
        session_id=session.session_id,
        workspace=session.workspace.workspace_root,
        tool_name=call.tool_use.name,
        tool_input=call.input,
        file=file,
        tool_use_id=call.tool_use.id,
        turn_id=call.turn_id,
    )


def input_file(v: ValidatedCall) -> str | None:
    """The workspace-relative file a call names (its first path field), for a
    pre-hook's ``{file}`` and ``file_patterns``."""
    workspace = v.session.workspace
    for name in v.entry.path_fields:
        value = v.input.get(name)
        if isinstance(value, str):
            return workspace.relative(workspace.resolve(value))
    return None


__all__ = ["GUARDED_EFFECTS", "ValidatedCall"]
