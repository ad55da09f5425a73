"""The closed set of errors a tool call can end in.

Every ToolError becomes a ``tool_result`` with ``is_error: true`` and a
``tool.failed`` (or ``tool.input_invalid``) event; none escapes the dispatcher.
Each class maps to one ``error_class`` wire value::

    ToolError                          (base; error_class execution_error)
    ├── ToolNotFound                   not_found
    ├── ToolValidationFailed           validation_error
    ├── ToolPermissionDenied           permission_denied
    │   └── WorkspaceEscape            a path resolved outside the workspace
    ├── ToolUserDenied                 user_denied
    ├── ToolTimeout                    timeout
    ├── ToolExecutionError             execution_error (base of the tools' own)
    │   ├── WorkspacePathNotFound      (dispatcher.workspace)
    │   └── PatchMalformed             (dispatcher.tools.patch.diff_parse)
    ├── ToolCancelled                  cancelled
    └── ConfirmationTimeout            confirmation_timeout
    ToolRegistrationError(ValueError)  a definition refused at registration
    └── SchemaNotExpressible           (dispatcher.mcp.schema)

Naming rule, the same in every package's ``errors`` module: a base class
(one that exists to be caught as a family) ends in ``Error``; a concrete
exception is named for the condition it reports, without ``Error``. A
condition refined by a narrower one keeps its condition name
(``ToolPermissionDenied``, refined by ``WorkspaceEscape``).

Elsewhere in the package: ``HunkFailed`` and ``SystemPatchFailed`` (patch),
``ShellSyntaxInvalid`` (shell), ``MemoryNotFound`` (memory store),
``UnknownConfirmation``, ``UnknownProfile``, ``SandboxUnavailable``, and
``InvalidTransition`` (a bug in the call's state machine, never the model's).
"""

from __future__ import annotations

from enum import StrEnum


class ToolErrorClass(StrEnum):
    """Why a tool call failed; the values are the wire strings of ``error_class``."""

    NOT_FOUND = "not_found"
    VALIDATION_ERROR = "validation_error"
    PERMISSION_DENIED = "permission_denied"
    USER_DENIED = "user_denied"
    TIMEOUT = "timeout"
    EXECUTION_ERROR = "execution_error"
    CANCELLED = "cancelled"
    CONFIRMATION_TIMEOUT = "confirmation_timeout"


class ToolError(Exception):
    """Base of the tool error hierarchy; tools raise subclasses of it.

    ``message`` is what the model and the clients see, so it must never carry
    secrets or tracebacks. ``is_user_visible`` tells clients whether to show it.
    """

    error_class: ToolErrorClass = ToolErrorClass.EXECUTION_ERROR

    def __init__(
        self,
        message: str,
        *,
        tool_use_id: str = "",
        is_user_visible: bool = True,
        partial_output: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tool_use_id = tool_use_id
        self.is_user_visible = is_user_visible
        # What a cancelled or timed-out tool produced before it stopped.
        self.partial_output = partial_output


class ToolNotFound(ToolError):
    error_class = ToolErrorClass.NOT_FOUND


class ToolValidationFailed(ToolError):
    error_class = ToolErrorClass.VALIDATION_ERROR

    def __init__(
        self, message: str, validation_errors: list[str] | None = None, *, tool_use_id: str = ""
    ) -> None:
        super().__init__(message, tool_use_id=tool_use_id)
        self.validation_errors = validation_errors or [message]


class ToolPermissionDenied(ToolError):
    error_class = ToolErrorClass.PERMISSION_DENIED


class WorkspaceEscape(ToolPermissionDenied):
    """A path resolved outside the session's workspace root."""


class ToolUserDenied(ToolError):
    error_class = ToolErrorClass.USER_DENIED


class ToolTimeout(ToolError):
    error_class = ToolErrorClass.TIMEOUT


class ToolExecutionError(ToolError):
    error_class = ToolErrorClass.EXECUTION_ERROR

    def __init__(
        self,
        message: str,
        *,
        underlying: BaseException | None = None,
        tool_use_id: str = "",
        is_user_visible: bool = True,
    ) -> None:
        super().__init__(message, tool_use_id=tool_use_id, is_user_visible=is_user_visible)
        self.underlying = underlying


class ToolCancelled(ToolError):
    error_class = ToolErrorClass.CANCELLED


class ConfirmationTimeout(ToolError):
    error_class = ToolErrorClass.CONFIRMATION_TIMEOUT


class ToolRegistrationError(ValueError):
    """A tool definition was refused at registration; the message names why
    (and, for schema problems, the construct and its JSON pointer)."""
