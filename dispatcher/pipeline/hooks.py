"""Lifecycle hooks (``hooks:``): commands a team configures to run at ten
points of a session's life, e.g. a linter after every edit.

Protocol (specs/pipeline.md): the command runs as ``sh -c`` with the
workspace as cwd, in the session's sandbox; ``{file}`` (the edited file, a
name the model chose) reaches it as data, never as shell text: the command
refers to the variable that carries it (placeholders.py, bound once when
the config is read). It gets the context as JSON on stdin and as
``TOOLRELAY_*`` environment variables beside a minimal PATH/HOME (never the
server's own environment). Exit 0 allows (stdout may be JSON with
``additionalContext`` and/or ``updatedInput``); exit 2 blocks a pre-hook
(stderr is the reason); any other exit, or a timeout, is a warning and
allows.

Every run is reported as one ``hook.completed`` event, published here (in
``HookRunner.run``) for tool hooks and the server's other hook events alike,
through the publisher the runner was given.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dispatcher.pipeline.commands import minimal_env, run_shell_command
from dispatcher.pipeline.globs import PathGlobs, check_globs
from dispatcher.pipeline.placeholders import (
    PLACEHOLDER_VARIABLES,
    PlaceholderError,
    bind_placeholders,
)
from dispatcher.publisher import EventPublisher
from dispatcher.sandbox import Sandbox, SandboxUnavailable
from protocol.payloads import HookCompleted

HOOK_OUTPUT_BYTES = 16 * 1024
# TOOLRELAY_TOOL_INPUT stays well below the kernel's limit for one
# environment string (128 KiB); longer strings are elided there (stdin has all).
ENV_INPUT_BYTES = 32 * 1024
ENV_STRING_CHARS = 1024
BLOCK_EXIT = 2


class HookEvent(StrEnum):
    """The ten points of a session's life a hook may run at."""

    PRE_TOOL_USE = "pre_tool_use"
    POST_TOOL_USE = "post_tool_use"
    PRE_LLM_CALL = "pre_llm_call"
    POST_LLM_CALL = "post_llm_call"
    SESSION_START = "session_start"
    SESSION_END = "session_end"
    ON_ERROR = "on_error"
    BUDGET_WARNING = "budget_warning"
    CONTEXT_COMPRESS = "context_compress"
    AGENT_COMPLETE = "agent_complete"


# Only these may block what follows them (exit 2).
BLOCKING_EVENTS = frozenset({HookEvent.PRE_TOOL_USE, HookEvent.PRE_LLM_CALL})


class HookConfig(BaseModel):
    """One hook: a command, optionally limited to tools (``matcher``, a
    tool-name regex matched in full) and files (``file_patterns``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    command: str = Field(min_length=1)
    matcher: str | None = None
    file_patterns: list[str] = Field(default_factory=list)
    timeout: float = Field(default=30.0, gt=0, le=600)

    @field_validator("matcher")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"matcher {value!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    _globs = field_validator("file_patterns")(check_globs)

    @field_validator("command")
    @classmethod
    def _placeholders_are_data(cls, value: str) -> str:
        """Refused at load time: a placeholder where its value could not
        reach the command as plain data (placeholders.py says where)."""
        try:
            bind_placeholders(value)
        except PlaceholderError as exc:
            raise ValueError(str(exc)) from None
        return value


class HooksConfig(BaseModel):
    """The ``hooks:`` section: a list of hooks per event."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pre_tool_use: list[HookConfig] = Field(default_factory=list)
    post_tool_use: list[HookConfig] = Field(default_factory=list)
    pre_llm_call: list[HookConfig] = Field(default_factory=list)
    post_llm_call: list[HookConfig] = Field(default_factory=list)
    session_start: list[HookConfig] = Field(default_factory=list)
    session_end: list[HookConfig] = Field(default_factory=list)
    on_error: list[HookConfig] = Field(default_factory=list)
    budget_warning: list[HookConfig] = Field(default_factory=list)
    context_compress: list[HookConfig] = Field(default_factory=list)
    agent_complete: list[HookConfig] = Field(default_factory=list)

    @property
    def configured(self) -> bool:
        """Whether any event has a hook (else a session needs no HookRunner)."""
        return any(self.for_event(event) for event in HookEvent)

    def for_event(self, event: HookEvent) -> list[HookConfig]:
        hooks: list[HookConfig] = getattr(self, event.value)
        return hooks


@dataclass(frozen=True, slots=True)
class HookContext:
    """What a hook is told about the moment it runs at."""

    session_id: str
    workspace: str
    tool_name: str | None = None
    tool_input: Mapping[str, Any] | None = None
    # The edited file, workspace-relative, when there is one.
    file: str | None = None
    tool_use_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The turn the hook runs in (the envelope of its hook.completed event).
    turn_id: str | None = None


Decision = Literal["allow", "block", "error"]


@dataclass(frozen=True, slots=True)
class HookResult:
    """One hook run: ``event_data()`` is ``hook.completed.data``."""

    name: str
    event: HookEvent
    decision: Decision
    exit_code: int | None
    duration_ms: float
    output: str = ""
    reason: str = ""
    additional_context: str | None = None
    updated_input: dict[str, Any] | None = None
    timed_out: bool = False
    tool_use_id: str | None = None

    def event_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "hook": self.name,
            "event": self.event.value,
            "decision": self.decision,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
        }
        if self.tool_use_id is not None:
            data["tool_use_id"] = self.tool_use_id
        return data

    def blocked_by_data(self) -> dict[str, str] | None:
        """``tool.failed.data.blocked_by`` when this hook blocked the call."""
        return {"kind": "hook", "name": self.name} if self.decision == "block" else None


@dataclass(frozen=True, slots=True)
class _Compiled:
    config: HookConfig
    matcher: re.Pattern[str] | None
    files: PathGlobs
    # The command as run: placeholders replaced by variable references.
    command: str


class HookRunner:
    """Selects and runs the hooks of an event (compiled once from config)."""

    def __init__(
        self,
        config: HooksConfig | None = None,
        *,
        base_env: Mapping[str, str] | None = None,
        output_limit: int = HOOK_OUTPUT_BYTES,
        publisher: EventPublisher | None = None,
    ) -> None:
        self.config = config or HooksConfig()
        # Where every run's hook.completed goes (None: not reported; scripts, tests).
        self.publisher = publisher
        # The environment hooks start from: pass the server's scrubbed one.
        self._env = minimal_env(base_env)
        self._output_limit = output_limit
        # A dry-run's view (read_only_view): the workspace is bound read-only.
        self._read_only = False
        self._by_event = {
            event: [
                _Compiled(
                    hook,
                    re.compile(hook.matcher) if hook.matcher is not None else None,
                    PathGlobs(hook.file_patterns),
                    bind_placeholders(hook.command),
                )
                for hook in self.config.for_event(event)
            ]
            for event in HookEvent
        }

    def has_hooks(self, event: HookEvent) -> bool:
        return bool(self._by_event[event])

    def read_only_view(self) -> HookRunner:
        """The same hooks for a dry-run: a dry-run changes nothing in the
        workspace, and hooks run workspace content (`npm run lint` runs the
        repository's scripts), so in the sandbox they see it read-only and
        are told ``TOOLRELAY_DRY_RUN=1``. Without a sandbox nothing enforces
        it (specs/pipeline.md)."""
        view = copy.copy(self)
        view._read_only = True
        return view

    async def run_lifecycle(
        self,
        event: HookEvent,
        *,
        session_id: str,
        workspace: str,
        sandbox: Sandbox | None,
        read_only: bool = False,
        turn_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[HookResult]:
        """The server's way to hooks outside a tool call (``session_start``,
        ``pre_llm_call``, ``on_error``, ...): run a session's hooks of
        ``event`` (none configured: nothing runs), as the read-only view for
        a dry-run. The server needs nothing else of the runner."""
        if not self.has_hooks(event):
            return []
        runner = self.read_only_view() if read_only else self
        context = HookContext(
            session_id=session_id, workspace=workspace, extra=dict(extra or {}), turn_id=turn_id
        )
        return await runner.run(event, context, sandbox=sandbox)

    def matching(self, event: HookEvent, context: HookContext) -> list[HookConfig]:
        """The hooks of ``event`` whose matcher and file patterns fit ``context``.
        A matcher needs a tool name, file patterns need a file."""
        return [hook.config for hook in self._matching(event, context)]

    def _matching(self, event: HookEvent, context: HookContext) -> list[_Compiled]:
        chosen: list[_Compiled] = []
        for hook in self._by_event[event]:
            if hook.matcher is not None and (
                context.tool_name is None or not hook.matcher.fullmatch(context.tool_name)
            ):
                continue
            if hook.files and (context.file is None or not hook.files.matches(context.file)):
                continue
            chosen.append(hook)
        return chosen

    async def run(
        self, event: HookEvent, context: HookContext, *, sandbox: Sandbox | None
    ) -> list[HookResult]:
        """Run every matching hook in order; a pre-hook that blocks stops the
        rest (its result is the last). An ``updatedInput`` is handed to the
        hooks after it (the caller validates and scopes the final input)."""
        results: list[HookResult] = []
        current = context
        for hook in self._matching(event, context):
            result = await self._run_one(hook, event, current, sandbox)
            self._report(result, current)
            results.append(result)
            if result.decision == "block":
                break
            if result.updated_input is not None and event in BLOCKING_EVENTS:
                current = dataclasses.replace(current, tool_input=result.updated_input)
        return results

    async def run_per_file(
        self,
        event: HookEvent,
        context: HookContext,
        files: list[str],
        *,
        sandbox: Sandbox | None,
    ) -> list[HookResult]:
        """``run`` once per file a call modified (apply_patch may touch
        several; ``{file}`` and ``file_patterns`` see one at a time), or once
        without a file when there is none. Stops at the first block."""
        if not files:
            return await self.run(event, context, sandbox=sandbox)
        results: list[HookResult] = []
        for path in files:
            one = dataclasses.replace(context, file=path)
            results.extend(await self.run(event, one, sandbox=sandbox))
            if block_reason(results) is not None:
                break
        return results

    def _report(self, result: HookResult, ctx: HookContext) -> None:
        """The one place a ``hook.completed`` event is published."""
        if self.publisher is None:
            return
        self.publisher.emit(
            HookCompleted(
                hook=result.name,
                event=result.event.value,
                decision=result.decision,
                exit_code=result.exit_code,
                duration_ms=result.duration_ms,
                tool_use_id=result.tool_use_id,
            ),
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
        )

    def _hook_env(self, event: HookEvent, ctx: HookContext) -> dict[str, str]:
        """The hook command's environment: the scrubbed base and the event's facts."""
        return {
            **self._env,
            "TOOLRELAY_EVENT": event.value,
            "TOOLRELAY_SESSION_ID": ctx.session_id,
            "TOOLRELAY_TOOL_NAME": ctx.tool_name or "",
            "TOOLRELAY_TOOL_INPUT": env_tool_input(ctx.tool_input),
            "TOOLRELAY_FILE": ctx.file or "",
            "TOOLRELAY_WORKSPACE": ctx.workspace,
            "TOOLRELAY_DRY_RUN": "1" if self._read_only else "0",
            # What ``{file}`` in the command refers to (never spliced in).
            PLACEHOLDER_VARIABLES["file"]: file_argument(ctx.file),
        }

    async def _run_one(
        self, compiled: _Compiled, event: HookEvent, ctx: HookContext, sandbox: Sandbox | None
    ) -> HookResult:
        hook = compiled.config
        payload = context_payload(event, ctx)
        try:
            run = await run_shell_command(
                compiled.command,
                workspace_root=ctx.workspace,
                sandbox=sandbox,
                env=self._hook_env(event, ctx),
                time_limit=hook.timeout,
                stdin=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
                output_limit=self._output_limit,
                writable_workspace=not self._read_only,
            )
        except (OSError, SandboxUnavailable) as exc:
            return HookResult(
                name=hook.name,
                event=event,
                decision="error",
                exit_code=None,
                duration_ms=0.0,
                reason=f"could not start: {exc}",
                tool_use_id=ctx.tool_use_id,
            )
        output = "\n".join(p.rstrip("\n") for p in (run.stdout, run.stderr) if p.strip())

        def result(decision: Decision, reason: str = "", **extra: Any) -> HookResult:
            return HookResult(
                name=hook.name,
                event=event,
                decision=decision,
                exit_code=run.exit_code,
                duration_ms=run.duration_ms,
                output=output,
                reason=reason,
                timed_out=run.timed_out,
                tool_use_id=ctx.tool_use_id,
                **extra,
            )

        if run.timed_out:
            return result("error", f"timed out after {hook.timeout:g} s")
        if run.exit_code == BLOCK_EXIT and event in BLOCKING_EVENTS:
            return result("block", run.stderr.strip() or run.stdout.strip() or "blocked by hook")
        if run.exit_code != 0:
            return result("error", f"exit {run.exit_code}")
        context_text, updated = _parse_stdout(run.stdout)
        return result(
            "allow",
            additional_context=context_text,
            updated_input=updated if event in BLOCKING_EVENTS else None,
        )


def context_payload(event: HookEvent, ctx: HookContext) -> dict[str, Any]:
    """The JSON a hook reads on stdin."""
    return {
        "event": event.value,
        "session_id": ctx.session_id,
        "workspace": ctx.workspace,
        "tool_name": ctx.tool_name,
        "tool_input": dict(ctx.tool_input) if ctx.tool_input is not None else None,
        "tool_use_id": ctx.tool_use_id,
        "file": ctx.file,
        **({"extra": dict(ctx.extra)} if ctx.extra else {}),
    }


def file_argument(path: str | None) -> str:
    """The value of ``{file}``. The model names the file, so a name like
    ``--config=x.toml`` or ``-rf`` must not become an option of the hook's
    program: a relative path starting with ``-`` gets ``./`` in front."""
    text = path or ""
    return "./" + text if text.startswith("-") else text


def env_tool_input(tool_input: Mapping[str, Any] | None) -> str:
    """TOOLRELAY_TOOL_INPUT: the input as JSON; when that is too long for an
    environment variable, long strings are replaced by a note (stdin always
    carries the whole input)."""
    text = json.dumps(dict(tool_input or {}), ensure_ascii=False)
    if len(text.encode("utf-8")) <= ENV_INPUT_BYTES:
        return text
    shortened = {
        key: (
            f"[{len(value)} characters; the whole input is on stdin]"
            if isinstance(value, str) and len(value) > ENV_STRING_CHARS
            else value
        )
        for key, value in (tool_input or {}).items()
    }
    text = json.dumps(shortened, ensure_ascii=False)
    if len(text.encode("utf-8")) <= ENV_INPUT_BYTES:
        return text
    return json.dumps({"_elided": "the input is too large; it is on stdin"})


def _parse_stdout(stdout: str) -> tuple[str | None, dict[str, Any] | None]:
    """``additionalContext``/``updatedInput`` from a JSON object on stdout;
    anything else is plain output."""
    text = stdout.strip()
    if not text.startswith("{"):
        return None, None
    try:
        data = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    context = data.get("additionalContext")
    updated = data.get("updatedInput")
    return (
        context if isinstance(context, str) and context else None,
        updated if isinstance(updated, dict) else None,
    )


def format_post_hook_output(results: list[HookResult]) -> str:
    """What post_tool_use hooks add to the result the model sees:
    ``[Hook <name>: FAILED (exit N)]`` + output for a failure (``timed out``
    for a timeout) and ``[Hook <name>]: <additionalContext>`` for context."""
    parts: list[str] = []
    for r in results:
        if r.decision == "error":
            said = "timed out" if r.timed_out else f"exit {r.exit_code}"
            body = r.output or r.reason
            parts.append(f"[Hook {r.name}: FAILED ({said})]" + (f"\n{body}" if body else ""))
        elif r.additional_context:
            parts.append(f"[Hook {r.name}]: {r.additional_context}")
    return "\n".join(parts)


def block_reason(results: list[HookResult]) -> HookResult | None:
    """The result that blocked, if one did."""
    for r in results:
        if r.decision == "block":
            return r
    return None


def final_input(results: list[HookResult], original: dict[str, Any]) -> dict[str, Any]:
    """The input after every ``updatedInput`` (the last wins)."""
    current = original
    for r in results:
        if r.updated_input is not None:
            current = r.updated_input
    return current
