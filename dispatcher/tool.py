"""The Tool protocol, the BaseTool every built-in tool extends, and what a
tool sees of one call (ToolContext) and returns (ToolOutput).

A tool is registered as a zero-argument factory; the dispatcher builds a fresh
instance for every call, so instance state never leaks between calls.

``BaseTool`` gives every stage of a call a default, so a tool writes only the
stages it needs. The dispatcher calls the *stateless* stages on one shared
instance (``RegisteredTool.stateless``) before it builds the executing one:

- ``path_fields``: input keys that name workspace paths; each is checked
  against the workspace root before confirmation.
- ``prepare(input, workspace)``: per-call work the later stages share (the
  shell's analysis of its command, a write's planned change), computed once
  and handed to ``rate``/``scope``/``preview`` as ``prepared=`` and to
  ``execute`` as ``context.prepared``. Default: None.
- ``rate(input, workspace)``: a per-call rating (``safe``/``dev``/``dangerous``)
  the confirmation policy may use; the event still reports the declared
  class. It gets the workspace because a rating may depend on what a path
  resolves to (a symlink out of the workspace is not a safe read).
- ``preview(input, workspace)``: what the call would do, for the confirmation
  request (the diff of a write, the command of a shell call).
- ``scope(input, workspace)``: what "allow for session" on this call grants
  (a ``GrantScope``). Default: the whole tool. The shell narrows it to each
  command's program and subcommand at that rating.

Each stage also works when called without ``prepared`` (tests and scripts
call them directly): it then prepares for itself.

Operational metadata a tool declares as class attributes (the server reads
them; see ``RegisteredTool``): ``timeout`` (its default dispatcher timeout),
``self_timed_up_to`` (it enforces per-call timeouts itself up to this many
seconds, so the dispatcher's timeout is only a backstop above it) and
``options_section`` (the config section handed to ``context.options``).

A plugin may still implement only the ``Tool`` protocol; the registry adapts
it to the BaseTool API once, at registration (``registry.ProtocolToolAdapter``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

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
    # What the tool's ``prepare`` computed for this call (None: nothing, or the
    # tool was called outside the dispatcher and must prepare for itself).
    prepared: Any = None


@dataclass(slots=True)
class ToolOutput:
    """A tool's structured result; the dispatcher wraps it in a tool_result."""

    content: list[TextBlock | ImageBlock]
    success: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)
    files_modified: list[str] | None = None
    command_executed: str | None = None
    # Structured result for clients, validated against definition.output_schema.
    data: dict[str, Any] | None = None

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


class BaseTool:
    """Defaults for every stage of a call; a tool overrides what it needs.

    Subclasses set ``definition`` and implement ``execute``. The stateless
    stages (``prepare``, ``rate``, ``scope``, ``preview``) run on a shared
    instance and must not keep per-call state on ``self``; what they compute
    for one call travels as ``prepared``.
    """

    definition: ToolDefinition
    path_fields: tuple[str, ...] = ()
    # The tool's own default dispatcher timeout in seconds; None: chosen by
    # its side effects (see registry.DEFAULT_TIMEOUT / LONG_TIMEOUT).
    timeout: ClassVar[float | None] = None
    # The tool stops its own work after a per-call timeout of at most this
    # many seconds; the dispatcher's timeout then only backs it up.
    self_timed_up_to: ClassVar[float | None] = None
    # The configuration options section handed to ``context.options``
    # (default: the tool's own name).
    options_section: ClassVar[str | None] = None

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> Any:
        """Per-call state the later stages share; computed once per call."""
        return None

    def rate(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> CallRating | None:
        """This call's rating, or None to be judged by the declared side effects.
        Raise a ToolError to refuse the call before anyone is asked."""
        return None

    def scope(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> GrantScope:
        """What "allow for session" grants: by default, the whole tool."""
        name = self.definition.name
        return GrantScope(((name, None),), f"allow {name} for this session")

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview | None:
        """What the call would do, for the confirmation request; None: show the
        input. ``sandbox`` is the session's: a preview that starts a process
        runs it where the call's own would."""
        return None

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        """Run the call; ``input`` is already validated against the schema."""
        raise NotImplementedError(f"{type(self).__name__} does not implement execute()")

    async def cancel(self) -> bool:
        """Abort an in-flight execute. The default has nothing to stop."""
        return True
