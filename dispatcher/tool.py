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
- ``effects(input, workspace)``: what the call would write, delete and run
  (``ToolEffects``). The pipeline (guardrails, dry-run plans, the paths a
  confirmation lists) reads only this: it never guesses from a tool's name.
  Default: a write-class tool writes the paths of its ``path_fields``; a
  none/read tool changes nothing; any other (an execute or network tool, a
  write tool without path fields) is ``unknown``, which the guardrails
  answer by asking a person.

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
import json
import logging
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from dispatcher.errors import ToolError
from protocol.canonical import ImageBlock, SideEffects, TextBlock, ToolDefinition

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
    # What the tool's own preview names; the confirmation request lists the
    # call's declared effects instead (``ToolEffects.modified``).
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


SUMMARY_LIMIT = 200


@dataclass(frozen=True, slots=True)
class ToolEffects:
    """What one call would write, delete and run, as its tool declares it from
    the validated input. Paths are workspace-relative with ``/``; a path
    reached through a symbolic link inside the workspace is listed both as
    written and as the file it leads to.

    ``unknown``: the tool cannot say (a plugin or MCP tool that writes or runs
    something, a tool whose derivation failed). The other fields then hold
    only what is known for sure, and the guardrails ask a person
    (specs/pipeline.md, "Guardrails": unknown effects)."""

    # Files written or created, and files deleted.
    writes: tuple[str, ...] = ()
    deletes: tuple[str, ...] = ()
    # Command lines the call runs, and their working directory.
    commands: tuple[str, ...] = ()
    cwd: str = "."
    # Paths the commands name (arguments, redirections, environment values):
    # a command naming a protected file is refused whether it reads or writes.
    command_paths: tuple[str, ...] = ()
    # (path, text) of content written: whole files, new text, added lines.
    added_text: tuple[tuple[str, str], ...] = ()
    # Lines added plus lines removed; None: not known (not counted).
    lines_changed: int | None = None
    # One line for people: dry-run plans, confirmation previews.
    summary: str = ""
    unknown: bool = False

    @property
    def modified(self) -> tuple[str, ...]:
        """Every path written, created or deleted, each once."""
        if not self.deletes:
            return self.writes
        return tuple(dict.fromkeys((*self.writes, *self.deletes)))

    @classmethod
    def not_known(cls, summary: str) -> ToolEffects:
        """Effects the tool cannot state."""
        return cls(summary=summary, unknown=True)


def summarize_input(tool_name: str, input: Mapping[str, Any]) -> str:
    """``name(key=value, ...)``: the summary of a call no tool describes better."""
    parts = []
    for key, value in input.items():
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if len(shown) > 40:
            shown = shown[:39] + "…"
        parts.append(f"{key}={shown}")
    return one_line(f"{tool_name}({', '.join(parts)})")


def one_line(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """The first line of ``text`` (`` …`` when more followed), cut to ``limit``."""
    stripped = text.strip()
    first = stripped.splitlines()[0] if stripped else ""
    if "\n" in stripped:
        first += " …"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def lexical_path(path: str) -> str:
    """``path`` normalised as written (``./a/../b`` -> ``b``), relative unless absolute."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    return norm if path.startswith("/") else norm.lstrip("/")


def declared_paths(path: str, workspace: WorkspaceFileAPI | None) -> tuple[str, ...]:
    """The workspace-relative names a write to ``path`` touches: the path as
    written (normalised) and, through the workspace, the one it physically
    names (a symbolic link inside the workspace followed). A path that
    escapes the workspace is left as written: the scope stage refuses it."""
    lexical = lexical_path(path)
    found = [] if path.startswith("/") else [lexical]
    if workspace is not None:
        try:
            real: str | None = workspace.relative(workspace.resolve(path))
        except (ToolError, OSError, ValueError):
            real = None
        if real is not None and real not in found:
            found.append(real)
    return tuple(found) or (lexical,)


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
    stages (``prepare``, ``rate``, ``scope``, ``preview``, ``effects``) run on a shared
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

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """What the call would write, delete and run (see ``ToolEffects``).
        The default: a write-class tool writes what its ``path_fields`` name;
        a none/read tool changes nothing; anything else cannot say. A tool
        that knows better overrides this; one that reads files or starts a
        process for it (``sandbox``: the session's) keeps that off the event
        loop. Raise a ToolError to refuse the call before anyone is asked."""
        return default_effects(self.definition, self.path_fields, input, workspace)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        """Run the call; ``input`` is already validated against the schema."""
        raise NotImplementedError(f"{type(self).__name__} does not implement execute()")

    async def cancel(self) -> bool:
        """Abort an in-flight execute. The default has nothing to stop."""
        return True


_CHANGES_NOTHING = frozenset({SideEffects.NONE, SideEffects.READ})


def default_effects(
    definition: ToolDefinition,
    path_fields: tuple[str, ...],
    input: Mapping[str, Any],
    workspace: WorkspaceFileAPI | None,
) -> ToolEffects:
    """BaseTool's effects: by the declared class and the path fields."""
    summary = summarize_input(definition.name, input)
    side_effects = definition.side_effects
    if side_effects in _CHANGES_NOTHING:
        return ToolEffects(summary=summary)
    paths = [v for name in path_fields if isinstance(v := input.get(name), str)]
    if side_effects is not SideEffects.WRITE or not paths:
        # An execute or network tool may do anything its input does not show.
        return ToolEffects.not_known(summary)
    written: dict[str, None] = {}
    for path in paths:
        written.update(dict.fromkeys(declared_paths(path, workspace)))
    return ToolEffects(writes=tuple(written), summary=summary)
