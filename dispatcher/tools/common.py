"""Helpers every built-in tool shares: schema building, option reading,
cancellation checks, and running blocking file work off the event loop.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dispatcher.errors import ToolCancelled, ToolError, ToolExecutionError, ToolPermissionDenied
from dispatcher.tool import ToolContext
from dispatcher.workspace import WorkspaceFileAPI, WorkspacePathNotFound

T = TypeVar("T")

# Work on inputs at least this large runs in a worker thread; below it the
# hop to a thread (tens of microseconds) costs more than the work itself.
THREAD_THRESHOLD_BYTES = 256 * 1024


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed object schema in the dispatcher's JSON-Schema subset."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def path_property(description: str) -> dict[str, Any]:
    """A string property holding a workspace path (listed in a tool's path_fields)."""
    return {"type": "string", "format": "path", "description": description}


def check_cancelled(context: ToolContext, what: str) -> None:
    """Raise ToolCancelled if the call was cancelled; file tools check once
    before they start and between units of work."""
    if context.cancel_event.is_set():
        raise ToolCancelled(f"{what} was cancelled before it finished")


async def run_blocking(func: Callable[[], T], *, size_hint: int = 0) -> T:
    """Run ``func`` inline when the input is small, else in a worker thread so
    a large file does not stall every other session's events."""
    if size_hint < THREAD_THRESHOLD_BYTES:
        return func()
    return await asyncio.to_thread(func)


def file_size(workspace: WorkspaceFileAPI, path: str) -> int:
    """Size of a confined path, 0 when it does not exist (the caller reports that)."""
    try:
        return workspace.stat(path).st_size
    except ToolError:
        return 0


def relative_path(workspace: WorkspaceFileAPI, path: str) -> str:
    """The confined, normalised workspace-relative form of ``path``: a name to
    show, compare or lock on, never to open (use the workspace's fd API)."""
    return workspace.relative(workspace.resolve(path))


def refuse_git_internals(workspace: WorkspaceFileAPI, path: str) -> str:
    """Write tools never touch ``.git``: a crafted ``.git/config`` could make a
    read-only git tool run programs (fsmonitor, filters). Returns the
    workspace-relative path when it is allowed. A name-based early check: the
    write itself repeats it on the path its walk reached (``git_guard``)."""
    rel = relative_path(workspace, path)
    git_guard(path)(rel)
    return rel


def git_guard(path: str) -> Callable[[str], None]:
    """A WorkspaceFileAPI write guard refusing any path inside a ``.git`` folder
    (the error names ``path``, as the caller gave it)."""

    def check(rel: str) -> None:
        if ".git" in rel.split("/"):
            raise ToolPermissionDenied(
                f"{path!r} is inside a .git directory; file tools do not modify git internals"
            )

    return check


def require_file(workspace: WorkspaceFileAPI, path: str) -> os.stat_result:
    """The status of ``path``, or a clear 'does not exist' / 'is a directory' error."""
    try:
        st = workspace.stat(path)
    except WorkspacePathNotFound:
        raise ToolExecutionError(f"file {path!r} does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        raise ToolExecutionError(f"{path!r} is a directory, not a file")
    return st


class Options:
    """Typed access to one tool's configuration options, with clear errors."""

    def __init__(self, tool_name: str, options: Mapping[str, Any]) -> None:
        self.tool_name = tool_name
        self.raw = options

    def integer(self, key: str, default: int, *, minimum: int, maximum: int) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be an integer, got {value!r}"
            )
        if not minimum <= value <= maximum:
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be between {minimum} and {maximum}, "
                f"got {value}"
            )
        return value

    def number(self, key: str, default: float, *, minimum: float, maximum: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be a number, got {value!r}"
            )
        if not minimum <= value <= maximum:
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be between {minimum:g} and "
                f"{maximum:g}, got {value:g}"
            )
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be true or false, got {value!r}"
            )
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw.get(key, default)
        if value not in choices:
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be one of {', '.join(choices)}, "
                f"got {value!r}"
            )
        return str(value)

    def string_list(self, key: str) -> tuple[str, ...]:
        value = self.raw.get(key, ())
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ToolExecutionError(
                f"option {key!r} of {self.tool_name} must be a list of strings, got {value!r}"
            )
        return tuple(value)


def clip_line(text: str, limit: int = 1000) -> str:
    """One line of text for a listing, cut with a marker when very long."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters]"
