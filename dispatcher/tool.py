"""The Tool protocol and what a tool sees of one call (ToolContext) and returns
(ToolOutput).

A tool is registered as a zero-argument factory; the dispatcher builds a fresh
instance for every call, so instance state never leaks between calls.

Beyond the required ``definition``/``execute``/``cancel``, a tool may offer
optional, *stateless* hooks that the dispatcher calls on a probe instance
before it builds the executing one (see ``ToolHooks``):

- ``path_fields``: input keys that name workspace paths; each is checked
  against the workspace root before confirmation (spec step 3).
- ``rate(input, workspace)``: a per-call rating (``safe``/``dev``/``dangerous``)
  the confirmation policy may use; the event still reports the declared
  class. It gets the workspace because a rating may depend on what a path
  resolves to (a symlink out of the workspace is not a safe read).
- ``preview(input, workspace)``: what the call would do, for the confirmation
  request (the diff of a write, the command of a shell call).
- ``scope(input, workspace)``: what "allow for session" on this call grants
  (a ``GrantScope``). Default: the whole tool. The shell narrows it to each
  command's program and subcommand at that rating.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from protocol.canonical import ImageBlock, TextBlock, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox
    from dispatcher.workspace import WorkspaceFileAPI


class CallRating(StrEnum):
    """A tool's rating of one call, finer than its declared side-effect class."""

    SAFE = "safe"
    DEV = "dev"
    DANGEROUS = "dangerous"


@dataclass(frozen=True, slots=True)
class ConfirmationPreview:
    """What a call would do, shown to whoever approves it."""

    text: str = ""
    kind: str = "text"  # "diff" | "command" | "text"
    projected_modifications: tuple[str, ...] = ()
    # The first ``keep`` characters are never cut when a long preview is
    # shortened: a shell's whole command and env must be seen to be approved.
    keep: int = 0


@dataclass(frozen=True, slots=True)
class GrantScope:
    """What "allow for session" on one call grants, and how to say it.

    ``parts``: (key, rating) pairs; a later call of the same tool is covered
    when every one of its parts has a remembered grant with the same key and
    a rating at least as high (a rating of None covers every rating).
    ``text``: the sentence shown on the button (``allow 'npm test' for this
    session``)."""

    parts: tuple[tuple[str, CallRating | None], ...]
    text: str


OutputSink = Callable[[str, str], None]
"""Receives (stream, text) chunks a tool produces while it runs."""


def _discard_output(stream: str, text: str) -> None:
    return None


@dataclass(slots=True)
class ToolContext:
    """What a tool sees about the session and the call it serves."""

    session_id: str
    turn_id: str
    tool_use_id: str
    workspace_path: str
    workspace_files: WorkspaceFileAPI
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("toolrelay.tool"))
    # Per-tool options from configuration (e.g. shell timeouts, sandbox switch).
    options: Mapping[str, Any] = field(default_factory=dict)
    # Streams partial output as ``tool.output_delta`` events.
    emit_output: OutputSink = _discard_output
    # The session's sandbox: every process a tool starts goes through
    # ``sandbox.command(argv)``. None when the sandbox is off.
    sandbox: Sandbox | None = None


@dataclass(slots=True)
class ToolOutput:
    """A tool's structured result; the dispatcher wraps it in a tool_result."""

    content: list[TextBlock | ImageBlock]
    success: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)
    files_modified: list[str] | None = None
    command_executed: str | None = None

    @classmethod
    def text(cls, text: str, *, success: bool = True, **kwargs: Any) -> ToolOutput:
        return cls(content=[TextBlock(text=text)], success=success, **kwargs)


@runtime_checkable
class Tool(Protocol):
    """Implemented by every tool, built-in or plugged in."""

    definition: ToolDefinition

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        """Run the call. ``input`` is already validated against the schema.
        Raise a ToolError subclass on a handled failure."""
        ...

    async def cancel(self) -> bool:
        """Abort an in-flight execute; True if it was cancelled cleanly. Idempotent."""
        ...


ToolFactory = Callable[[], Tool]


class ToolHooks:
    """Reads a tool's optional hooks with safe defaults."""

    @staticmethod
    def path_fields(tool: Tool) -> tuple[str, ...]:
        return tuple(getattr(tool, "path_fields", ()))

    @staticmethod
    def rate(tool: Tool, input: dict[str, Any], workspace: WorkspaceFileAPI) -> CallRating | None:
        rate = getattr(tool, "rate", None)
        if rate is None:
            return None
        result: CallRating = rate(input, workspace)
        return result

    @staticmethod
    def scope(
        tool: Tool, name: str, input: dict[str, Any], workspace: WorkspaceFileAPI
    ) -> GrantScope:
        """The tool's own scope, or the whole tool (``name``) by default."""
        scope = getattr(tool, "scope", None)
        if scope is None:
            return GrantScope(((name, None),), f"allow {name} for this session")
        result: GrantScope = scope(input, workspace)
        return result

    @staticmethod
    async def preview(
        tool: Tool,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
    ) -> ConfirmationPreview | None:
        """The tool's ``preview(input, workspace)``. A preview that starts a
        process (apply_patch may run GNU patch) declares a ``sandbox`` keyword
        and gets the session's sandbox (None when it is off), so that process
        runs where the call's own would; previews without the keyword (plugins
        written before it existed) are called as before."""
        preview = getattr(tool, "preview", None)
        if preview is None:
            return None
        try:
            params = inspect.signature(preview).parameters
        except (TypeError, ValueError):  # a callable without a readable signature
            params = MappingProxyType({})
        named = params.get("sandbox")
        takes_sandbox = (
            named is not None
            and named.kind
            in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ) or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        result: ConfirmationPreview
        if takes_sandbox:
            result = await preview(input, workspace, sandbox=sandbox)
        else:
            result = await preview(input, workspace)
        return result
